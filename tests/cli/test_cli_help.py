"""The command line explains itself: ``--version``, help on every command and option, "did you
mean" for commands, options and policy fields, and YAML errors naming the file and key once."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy import __version__
from proxy.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.own_store  # the parser's answers: no command here reaches a store


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=60, check=False,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               **(env or {})})


def parsers(parser: argparse.ArgumentParser, name: str = "context-proxy"
            ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions}
            for sub_name, sub in action.choices.items():
                assert sub_name in helped, f"{name} {sub_name}: no help text"
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_command_and_option_has_help() -> None:
    seen = 0
    for name, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            seen += 1
            assert action.help and action.help != argparse.SUPPRESS, \
                f"{name}: {action.option_strings or action.dest} has no help text"
    assert seen > 30


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"context-proxy {__version__}"


@pytest.mark.parametrize(("args", "hint"), [
    (["kyes"], "(did you mean 'keys'?)"),
    (["keys", "craete", "--org", "a"], "(did you mean 'create'?)"),
    (["policy", "shwo"], "(did you mean 'show'?)"),
    (["serve", "--prot", "80"], "(did you mean '--port'?)"),
])
def test_did_you_mean(args: list[str], hint: str) -> None:
    out = run(*args)
    assert out.returncode == 2 and hint in out.stderr.strip().splitlines()[-1], out.stderr


def test_nothing_close_suggests_nothing() -> None:
    out = run("zzzzzz")
    assert out.returncode == 2 and "did you mean" not in out.stderr


def test_a_mistyped_policy_field_names_the_file_once(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    yaml = folder / "platform.yaml"
    yaml.write_text("defaults:\n  compaction:\n    triger_ratio: 0.8\n")
    out = run("policy", "validate", str(folder))
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert lines[0].count(str(yaml)) == 1 and lines[0].count("triger_ratio") == 1
    assert "'defaults.compaction.triger_ratio'" in lines[0]
    assert "did you mean 'compaction.trigger_ratio'?" in lines[0]
    yaml.write_text("defaults:\n  compaction:\n    trigger_ratio: 7\n")
    bad_value = run("policy", "validate", str(folder)).stderr.strip()
    assert bad_value.count(str(yaml)) == 1 and bad_value.count("trigger_ratio") == 1


def test_a_mistyped_field_of_policy_set(tmp_path: Path) -> None:
    out = run("policy", "set", "--org", "acme", "compaction.triger_ratio=0.5",
              env={"CONTEXT_PROXY_DB": str(tmp_path / "p.db")})
    assert out.returncode != 0
    assert "did you mean 'compaction.trigger_ratio'?" in out.stderr
