"""``POST /v1/chat/completions`` (``proxy.http.chat``), its handler called in process in front of
the fake upstream: a whole answer with the ``X-Context-*`` headers, a streamed one relayed
event by event, the key checked first, a bad body refused before anything goes upstream, any
other method a 405."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from inproc import Sent, routed

from proxy.errors import ApiError
from proxy.http.chat import chat_completions
from proxy.http.forward import not_allowed
from proxy.state import STATE
from proxy.testing.fake_upstream import FakeUpstream

App = Callable[..., Awaitable[web.Application]]
BODY = {"model": "m-32k", "messages": [{"role": "user", "content": "hello there"}]}


async def test_a_whole_answer_carries_what_the_proxy_did(make_app: App,
                                                         fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    key = app[STATE].store.keys.create("acme")[1]
    answer = await chat_completions(await routed(
        app, "POST", "/v1/chat/completions", body=BODY,
        headers={"Authorization": f"Bearer {key}", "X-Conversation-Id": "ticket-1"}))
    assert answer.status == 200
    content = json.loads(answer.body)["choices"][0]["message"]["content"]  # type: ignore
    assert content == "ack: hello there"
    assert answer.headers["X-Context-Compaction"] == "none"
    assert int(answer.headers["X-Context-Tokens-Before"]) > 0
    sent = fake_upstream.requests[-1]
    assert sent.json == BODY and "X-Conversation-Id" not in sent.headers
    assert sent.headers["Authorization"].startswith("Bearer sk-upstream-")


async def test_a_stream_is_relayed_event_by_event(make_app: App) -> None:
    app = await make_app()
    key = app[STATE].store.keys.create("acme")[1]
    out = Sent()
    answer = await chat_completions(await routed(
        app, "POST", "/v1/chat/completions", body={**BODY, "stream": True},
        headers={"Authorization": f"Bearer {key}"}, sent=out))
    assert answer.status == 200 and out.ended
    text = out.body.decode()
    assert text.rstrip().endswith("data: [DONE]") and text.count("data: ") >= 3
    assert "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in text.splitlines() if line.startswith("data: {")
                   and json.loads(line[6:])["choices"]) == "ack: hello there"


async def test_the_key_then_the_body_are_checked_before_anything_goes_upstream(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    key = app[STATE].store.keys.create("acme")[1]
    with pytest.raises(ApiError) as unknown:
        await chat_completions(await routed(app, "POST", "/v1/chat/completions", body=BODY,
                                            headers={"Authorization": "Bearer cp-nope"}))
    assert unknown.value.status == 401
    with pytest.raises(ApiError) as bad:
        await chat_completions(await routed(app, "POST", "/v1/chat/completions",
                                            body={"model": "m-32k", "messages": []},
                                            headers={"Authorization": f"Bearer {key}"}))
    assert (bad.value.status, bad.value.param) == (400, "messages")
    assert fake_upstream.chat_requests() == []
    with pytest.raises(web.HTTPMethodNotAllowed):
        await not_allowed(await routed(app, "GET", "/v1/chat/completions"))
