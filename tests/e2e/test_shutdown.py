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
from proxy.testing.fake.faults import Fault
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


def serve(env: dict[str, str], log_path: Path, port: int) -> subprocess.Popen[bytes]:
    """``context-proxy serve`` with ``env`` (its stderr in ``log_path``), once it listens."""
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve"], env=env,
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)


def new_key(env: dict[str, str]) -> str:
    created = subprocess.run([sys.executable, "-m", "proxy.cli", "keys", "create", "--org",
                              "acme"], env=env, cwd=ROOT, capture_output=True, check=True)
    return str(json.loads(created.stdout)["key"])


def test_sigterm_ends_open_streams_with_an_error_within_the_grace(
        slow_upstream: str, tmp_path: Path, store_target: Callable[[str], Path | str]) -> None:
    port, db = free_port(), tmp_path / "proxy.db"
    env = {**os.environ, "CONTEXT_PROXY_UPSTREAM_URL": slow_upstream,
           "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-0001", "CONTEXT_PROXY_DB": str(db),
           "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_SHUTDOWN_GRACE_S": str(GRACE_S),
           "CONTEXT_PROXY_POLICIES": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    key = new_key(env)
    proc = serve(env, tmp_path / "serve.log", port)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
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
        assert store.keys.all()[0].org == "acme"
    finally:
        store.close()


@pytest.fixture
def stalled_upstream() -> Iterator[tuple[str, FakeUpstream]]:
    """A fake whose whole answers on the three APIs take half a minute, on its own loop."""
    fake = FakeUpstream(faults=[Fault(delay_s=30.0, path=p, times=-1) for p in (
        "/v1/chat/completions", "/v1/messages", "/v1/responses")])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(fake.start(), loop).result(10)
    yield url, fake

    async def stop() -> None:  # its answers still sleep: end them, then stop it
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.sleep(0.1)
        await fake.stop()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


WHOLE = {"/v1/chat/completions": {"model": "gpt-4o",
                                  "messages": [{"role": "user", "content": "hi"}]},
         "/v1/messages": {"model": "m", "max_tokens": 8,
                          "messages": [{"role": "user", "content": "hi"}]},
         "/v1/responses": {"model": "m", "input": "hi"}}


@pytest.mark.usefixtures("database_url")
def test_sigterm_answers_whole_requests_still_waiting_503_within_the_grace(
        stalled_upstream: tuple[str, FakeUpstream], tmp_path: Path) -> None:
    url, fake = stalled_upstream
    port = free_port()
    env = {**os.environ, "CONTEXT_PROXY_UPSTREAM_URL": url, "CONTEXT_PROXY_ANTHROPIC_URL": url,
           "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-0001",
           "CONTEXT_PROXY_DB": str(tmp_path / "proxy.db"), "CONTEXT_PROXY_PORT": str(port),
           "CONTEXT_PROXY_SHUTDOWN_GRACE_S": str(GRACE_S),
           "CONTEXT_PROXY_POLICIES": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    key = new_key(env)
    proc = serve(env, tmp_path / "serve.log", port)
    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def ask(path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", path, json.dumps(WHOLE[path]),
                         {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            answers[path] = (resp.status, dict(resp.getheaders()), resp.read())
        except OSError as e:  # a cut instead of an answer: reported by the assertions below
            answers[path] = (0, {}, repr(e).encode())
        finally:
            conn.close()

    try:
        threads = [threading.Thread(target=ask, args=(p,)) for p in WHOLE]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        # All three are waiting for the upstream now (serve's own look at /v1/models aside).
        while len({r.path for r in fake.requests} & set(WHOLE)) < len(WHOLE):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=GRACE_S + 10)  # a bound against a hang; the answers below say when
        for t in threads:
            t.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    # Each was answered by the proxy before aiohttp's cut at the grace (a cut has no answer).
    assert set(answers) == set(WHOLE)
    said = [line for line in (tmp_path / "serve.log").read_text().splitlines()
            if "shut down in" in line]
    assert len(said) == 1 and "INFO" in said[0], said
    assert "drained 3 request(s) in flight (3 finished, 0 cut" in said[0]
    for path, (status, headers, body) in answers.items():
        assert status == 503 and headers.get("x-should-retry") == "true", (path, status, body)
        shape = json.loads(body)
        if path == "/v1/messages":
            assert shape["type"] == "error"
        else:
            assert shape["error"]["code"] == "shutting_down"
