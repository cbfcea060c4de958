"""The harness (``proxy.testing.harness``) before it serves: where its proxy's store is (a file
in the folder given, or the PostgreSQL database the process is pointed at), its upstream key,
coroutines run on its own loop, and the answers it records (the proxy serving through it is
what every end-to-end test exercises)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.testing.harness import Answer, Harness

pytestmark = pytest.mark.own_store  # never started: no harness here opens a store


def test_the_store_is_a_file_in_the_folder_or_the_database_the_process_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONTEXT_PROXY_DATABASE_URL", raising=False)
    h = Harness(tmp_path)
    assert h._env["CONTEXT_PROXY_DB"] == str(tmp_path / "proxy.db")
    assert h._env["CONTEXT_PROXY_DATABASE_URL"] == ""
    assert h.upstream_key.startswith("sk-upstream-") and h.base_url == "" and h.answers == []
    monkeypatch.setenv("CONTEXT_PROXY_DATABASE_URL", "postgresql://u@db/x")
    pg = Harness(tmp_path)
    assert pg._env["CONTEXT_PROXY_DATABASE_URL"] == "postgresql://u@db/x"
    mine = Harness(tmp_path, env={"CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-mine"})
    assert mine.upstream_key == "sk-mine"
    for made in (h, pg, mine):
        made.loop.close()


def test_coroutines_run_on_the_harness_loop(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h._thread.start()
    try:
        async def where() -> object:
            return asyncio.get_running_loop()

        assert h.call(where()) is h.loop
    finally:
        h.loop.call_soon_threadsafe(h.loop.stop)
        h._thread.join(5)
        h.loop.close()
    h.stop()  # a closed harness: nothing left to stop


async def test_each_answer_is_recorded_with_its_error_body(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        req = make_mocked_request("POST", "/v1/chat/completions")
        await h._answered(req, web.Response(status=200, text="{}",
                                            headers={"X-Context-Compaction": "none"}))
        await h._answered(req, web.Response(status=429, text='{"error": "slow down"}'))
        await h._answered(req, web.StreamResponse(status=500))  # streamed: no body to keep
        assert [(a.status, a.error) for a in h.answers] == [
            (200, None), (429, '{"error": "slow down"}'), (500, None)]
        assert isinstance(h.answers[0], Answer)
        assert h.answers[0].headers["X-Context-Compaction"] == "none"
    finally:
        h.loop.close()
