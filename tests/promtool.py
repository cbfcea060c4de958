"""Run Prometheus's own checker, ``promtool``, on what the proxy exposes or ships.

A missing promtool fails the test that needs it (never a skip): the checks are part of the
contract (SPEC section 9), and CI installs it (``.ci/run``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL = ("promtool is missing: install Debian's prometheus package "
           "(apt-get install -y --no-install-recommends prometheus); .ci/run does it in CI")


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``promtool args...`` with ``stdin``; its result, whatever the exit code."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(INSTALL)
    return subprocess.run([path, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=cwd, check=False)


def lint_metrics(text: str) -> str:
    """``promtool check metrics`` on an exposition: its complaints ("" when clean)."""
    result = promtool("check", "metrics", stdin=text)
    said = (result.stdout + result.stderr).strip()
    return f"exit {result.returncode}: {said}" if result.returncode or said else ""
