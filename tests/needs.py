"""``need()``: a tool a test needs is missing. The suite passes on a machine with only Python:
such tests skip naming what is missing and how to install it, unless
``CONTEXT_PROXY_REQUIRE_ALL=1`` (``.ci/run`` sets it) makes each of those skips a failure."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ALL = "CONTEXT_PROXY_REQUIRE_ALL"


def need(what: str, how_to_install: str) -> NoReturn:
    """Skip, naming ``what`` is missing and ``how_to_install`` it, or fail when
    ``CONTEXT_PROXY_REQUIRE_ALL=1`` (CI: there, a missing tool is a broken set-up)."""
    message = f"{what} is missing: {how_to_install}"
    if os.environ.get(REQUIRE_ALL, "") not in ("", "0"):
        pytest.fail(f"{message} ({REQUIRE_ALL} is set: nothing may be skipped)", pytrace=False)
    pytest.skip(message)
