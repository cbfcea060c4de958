"""The managed routes' way upstream and back (``proxy.http.forward``), called in process in
front of the fake upstream: a context-length refusal is retried once after compacting (and
relayed when compacting changes nothing), an unreachable upstream is a 502 that still says what
the proxy did, and every send books the proxy's own time."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from inproc import routed

from proxy.apis import APIS
from proxy.apis.calls import ApiUsageScanner
from proxy.context.accounting import overhead
from proxy.http.chat import chat_completions
from proxy.http.forward import Leg
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.state import STATE
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.scrape import metric
from proxy.upstream.answers import unusable_completion

App = Callable[..., Awaitable[web.Application]]
# The policy believes the model's window is large; the upstream refuses past 8k.
BELIEVED = PlatformConfig(defaults=validate_layer({"models": {"m-8k": 200_000}}))


async def ask(app: web.Application, messages: list[dict[str, Any]]) -> web.StreamResponse:
    key = app[STATE].store.keys.create("acme")[1]
    return await chat_completions(await routed(
        app, "POST", "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
        body={"model": "m-8k", "messages": messages, "tools": agent.TOOLS}))


async def test_a_context_length_refusal_is_retried_once_after_compacting(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    fake_upstream.models["m-8k"] = 8192
    fake_upstream.enforce_windows = True
    app = await make_app(BELIEVED)
    answer = await ask(app, agent.conversation(agent.AgentSpec(output_tokens=(900, 1100)), 12))
    assert answer.status == 200 and answer.headers["X-Context-Retried"]
    assert answer.headers["X-Context-Compaction"] == "auto"
    sent = [r.status for r in fake_upstream.requests
            if r.path == "/v1/chat/completions" and not is_summary_request(r.json)]
    assert sent == [400, 200]  # refused, compacted, sent once more


async def test_a_refusal_compacting_cannot_help_is_relayed(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    fake_upstream.models["m-8k"] = 10  # nothing fits
    fake_upstream.enforce_windows = True
    app = await make_app(BELIEVED)
    answer = await ask(app, [{"role": "user", "content": "a short question"}])
    assert answer.status == 400
    body = json.loads(answer.body)  # type: ignore[attr-defined]
    assert body["error"]["code"] == "context_length_exceeded"
    assert "X-Context-Retried" not in answer.headers and answer.headers["X-Context-Compaction"]


async def test_an_unreachable_upstream_is_a_502_that_says_what_the_proxy_did(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    await fake_upstream.stop()  # the upstream goes away
    answer = await ask(app, [{"role": "user", "content": "hi"}])
    assert answer.status == 502 and answer.headers["X-Context-Compaction"] == "none"
    assert json.loads(answer.body)["error"]["code"] == "upstream_unreachable"  # type: ignore


async def test_each_send_books_the_proxys_own_time(make_app: App) -> None:
    app = await make_app()
    state = app[STATE]
    key = state.store.keys.create("acme")[1]
    overhead.begin()  # the request arrives (the middleware starts its stopwatch)
    await chat_completions(await routed(app, "POST", "/v1/chat/completions",
                                        headers={"Authorization": f"Bearer {key}"},
                                        body={"model": "m-32k", "messages": [
                                            {"role": "user", "content": "hi"}]}))
    text = state.metrics.render().decode()
    assert metric(text, "context_proxy_overhead_seconds_count", route="chat") == 1
    leg = Leg(state.upstream, "/chat/completions", {}, "chat", check=unusable_completion,
              usage=APIS["chat"].usage, scanner=lambda: ApiUsageScanner(APIS["chat"]))
    assert leg.shape is not None and leg.query == "" and leg.stream_end == ()
