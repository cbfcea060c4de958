"""The command line's parser (``proxy.cli.parser.Parser``): a mistyped command, choice or option
(a subcommand's too) is refused with the closest one suggested."""

from __future__ import annotations

import argparse

import pytest

from proxy.cli.parser import Parser


def parser() -> Parser:
    p = Parser(prog="tool")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int)
    serve.add_argument("--format", choices=("text", "json"))
    sub.add_parser("keys")
    return p


def refusal(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(args)
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_mistyped_command_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert refusal(["serv"], capsys).endswith("(did you mean 'serve'?)")
    assert "did you mean" not in refusal(["zzzz"], capsys)


def test_a_mistyped_choice_or_subcommand_option_suggests_the_closest(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert refusal(["serve", "--format", "jsn"], capsys).endswith("(did you mean 'json'?)")
    assert refusal(["serve", "--prot", "8080"], capsys).endswith("(did you mean '--port'?)")
    assert refusal(["serve", "--prot=8080"], capsys).endswith("(did you mean '--port'?)")


def test_subcommand_parsers_are_parsers_too() -> None:
    p = parser()
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert all(isinstance(s, Parser) for s in subs.choices.values())
    assert p.parse_args(["serve", "--port", "1"]).port == 1
