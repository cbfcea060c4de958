"""The command line's parser: argparse, plus "did you mean" for a mistyped command, choice or
option (argparse itself suggests nothing before Python 3.14)."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from proxy.policy.model import did_you_mean

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_UNKNOWN = re.compile(r"unrecognized arguments: (.*)")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors suggest the closest command, choice or option.
    Subcommand parsers are of this class too (``add_subparsers`` makes them so)."""

    def error(self, message: str) -> NoReturn:
        super().error(message + self._suggestion(message))

    def _suggestion(self, message: str) -> str:
        found = _CHOICE.search(message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2))
            return did_you_mean(found.group(1), choices)
        found = _UNKNOWN.search(message)
        if found:
            options = sorted(_options(self))
            for word in found.group(1).split():
                name = word.split("=", 1)[0]
                if name.startswith("-"):
                    hint = did_you_mean(name, options)
                    if hint:
                        return hint
        return ""


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of ``parser`` and of its subcommands (argparse reports an unknown
    option of a subcommand from the top-level parser)."""
    found = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                found |= _options(sub)
    return found
