"""SIGTERM with a stream open: the proxy finishes within its grace and the stream ends with an
SSE error event, not a silent cut."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.store import Store
from proxy.testing.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 2.0


@pytest.fixture
def slow_upstream() -> Iterator[str]:
    """A fake whose streams drip one chunk a second for a minute, on its own loop."""
    fake = FakeUpstream(stream_delay_s=1.0, stream_chunks=60,
                        responder=lambda body: {"role": "assistant", "content": "tick " * 60})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(fake.start(), loop).result(10)
    yield url
    asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_ends_open_streams_with_an_error_within_the_grace(
        slow_upstream: str, tmp_path: Path, store_target: Callable[[str], Path | str]) -> None:
    port, db = free_port(), tmp_path / "proxy.db"
    env = {**os.environ, "CONTEXT_PROXY_UPSTREAM_URL": slow_upstream,
           "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-0001", "CONTEXT_PROXY_DB": str(db),
           "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_SHUTDOWN_GRACE_S": str(GRACE_S),
           "CONTEXT_PROXY_POLICIES": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    created = subprocess.run([sys.executable, "-m", "proxy.cli", "keys", "create", "--org",
                              "acme"], env=env, cwd=ROOT, capture_output=True, check=True)
    key = json.loads(created.stdout)["key"]
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve"], env=env,
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        conn.request("POST", "/v1/chat/completions", json.dumps({
            "model": "gpt-4o", "stream": True,
            "messages": [{"role": "user", "content": "count"}]}),
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        first = resp.read1(65536)
        assert b"data:" in first
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rest = b""
        while chunk := resp.read1(65536):
            rest += chunk
        proc.wait(timeout=GRACE_S + 10)
        assert time.monotonic() - sent <= GRACE_S + 1.0
        assert b'"code": "upstream_broken"' in rest.replace(b'"code":"', b'"code": "')
        assert b"[DONE]" not in rest  # the minute-long answer did not finish
    finally:
        conn.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert "ended 1 open stream(s) with an error event" in (tmp_path / "serve.log").read_text()
    store = Store(store_target("proxy.db"))  # the store is consistent: it opens whole
    try:
        if store.kind == "sqlite":
            assert store.read_one("PRAGMA integrity_check")[0] == "ok"
        assert store.list_keys()[0].org == "acme"
    finally:
        store.close()
