"""The three managed routes behave alike where the documentation says they do: each books its
upstream leg in ``context_proxy_upstream_duration_seconds`` (HTTP, whole and streamed, and the
Responses WebSocket), and each merges the ``X-Context-Compact`` hint's note into the report's
others."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

UPSTREAM = "context_proxy_upstream_duration_seconds_count"
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "hello"}]}),
    "responses": ("/responses", {"model": "m", "input": "hello"}),
    "messages": ("/messages", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "hello"}]}),
}


def _post(h: Harness, key: str, route: str, stream: bool) -> httpx.Response:
    path, body = BODIES[route]
    answer = httpx.post(h.base_url + path, json={**body, "stream": stream}, timeout=30,
                        headers={"Authorization": f"Bearer {key}",
                                 "X-Conversation-Id": f"parity-{route}"})
    assert answer.status_code == 200, answer.text
    return answer


def test_every_route_books_its_upstream_leg(make_harness: Callable[..., Harness]) -> None:
    h = make_harness(fake=FakeUpstream(stream_chunks=2))
    key = h.create_key("acme")
    for route in BODIES:
        for stream in (False, True):
            _post(h, key, route, stream)
    h.settle()
    text = scrape(h.base_url.removesuffix("/v1"))
    assert {route: metric(text, UPSTREAM, route=route) for route in BODIES} == \
        {"chat": 2, "responses": 2, "messages": 2}


def test_the_responses_socket_books_its_upstream_leg(make_harness: Callable[..., Harness]
                                                     ) -> None:
    h = make_harness(fake=FakeUpstream(stream_chunks=2))
    key = h.create_key("acme")
    before = h.metric(UPSTREAM, route="responses")

    async def one_turn() -> str:
        async with aiohttp.ClientSession() as s, s.ws_connect(
                h.base_url + "/responses", headers={
                    "Authorization": f"Bearer {key}",
                    "OpenAI-Beta": "responses_websockets=2026-02-06"}) as ws:
            await ws.send_str(json.dumps({"type": "response.create", "model": "m",
                                          "input": "hello"}))
            while True:
                event = json.loads((await ws.receive(timeout=30)).data)
                if event["type"] in ("response.completed", "response.failed", "error"):
                    return str(event["type"])

    assert asyncio.run(one_turn()) == "response.completed"
    assert h.metric(UPSTREAM, route="responses") == before + 1


def test_the_compaction_hint_is_noted_on_every_route(
        make_harness: Callable[..., Harness]) -> None:
    """Manual compaction off: every route notes the ignored hint the same way (one helper,
    ``manual.noted``, which keeps the report's other notes: tests/context/test_manual.py)."""
    h = make_harness(fake=FakeUpstream())
    key = h.create_key("acme")
    for route, (path, body) in BODIES.items():
        answer = httpx.post(h.base_url + path, json=body, timeout=30, headers={
            "Authorization": f"Bearer {key}", "X-Context-Compact": "now"})
        assert answer.status_code == 200, (route, answer.text)
        assert answer.headers.get("X-Context-Compact-Ignored") == \
            "manual compaction is disabled on this deployment", route
