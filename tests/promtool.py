"""Run Prometheus's own checker, ``promtool``, on what the proxy exposes or ships.

A missing promtool skips the test that needs it, saying how to install it (``need``); in CI
(``CONTEXT_PROXY_REQUIRE_ALL=1``, set by ``.ci/run``, which installs it) that is a failure.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from needs import need

INSTALL = ("install Debian's prometheus package (apt-get install -y --no-install-recommends "
           "prometheus) or put Prometheus's promtool on PATH; .ci/run does it in CI")


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``promtool args...`` with ``stdin``; its result, whatever the exit code."""
    path = shutil.which("promtool")
    if path is None:
        need("promtool (Prometheus's checker, on PATH)", INSTALL)
    return subprocess.run([path, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=cwd, check=False)


def lint_metrics(text: str) -> str:
    """``promtool check metrics`` on an exposition: its complaints ("" when clean)."""
    result = promtool("check", "metrics", stdin=text)
    said = (result.stdout + result.stderr).strip()
    return f"exit {result.returncode}: {said}" if result.returncode or said else ""
