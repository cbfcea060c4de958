"""``demo --serve`` (``proxy.cli.demo_serve``): what it prints to paste (the base URL, the key, a
curl line and an ``openai`` one), and that it serves until SIGINT or SIGTERM."""

from __future__ import annotations

import io
import os
import shlex
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from proxy.cli.demo_serve import keep_serving, try_lines

BASE, KEY = "http://127.0.0.1:8123/v1", "cp-demo-key"


def test_the_lines_to_paste_name_the_url_and_key_and_run_as_shell() -> None:
    text = try_lines(BASE, KEY)
    assert f"base_url: {BASE}" in text and f"api key:  {KEY}" in text
    curl = next(line.strip() for line in text.splitlines() if line.strip().startswith("curl"))
    words = shlex.split(curl)  # the line parses as a shell command
    assert words[:3] == ["curl", "-s", f"{BASE}/chat/completions"]
    assert f"Authorization: Bearer {KEY}" in words and '"model": "demo-agent"' in words[-1]
    assert f"{BASE}/conversations/demo-session/dividers" in text


@pytest.fixture
def signals_restored() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_it_serves_until_a_signal(sig: signal.Signals, signals_restored: None) -> None:
    out = io.StringIO()

    def send_when_waiting() -> None:
        for _ in range(500):  # once it printed the lines it waits: poll, no timing assertion
            if "Ctrl-C to stop" in out.getvalue():
                break
            time.sleep(0.01)
        os.kill(os.getpid(), sig)

    threading.Thread(target=send_when_waiting, daemon=True).start()
    keep_serving(out, BASE, KEY)
    assert out.getvalue().endswith("stopped\n") and KEY in out.getvalue()
