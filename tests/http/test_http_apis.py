"""The routes of the APIs read through an adapter (``proxy.http.apis``), handlers called in
process in front of the fake upstream: a Messages request managed and answered in its API's
shape with the platform's Anthropic key, a tool sequence the API refuses a 400, a Responses
request naming a previous response relayed unchanged, an answer of another API's shape a 502."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from inproc import Sent, routed

from proxy.apis import messages, responses
from proxy.auth import Principal
from proxy.errors import ApiError
from proxy.http.apis import HISTORY, leg_for, manage, managed
from proxy.state import STATE
from proxy.testing.fake_upstream import FakeUpstream, Fault

App = Callable[..., Awaitable[web.Application]]
MESSAGES = {"model": "claude-x", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}]}


async def call(app: web.Application, api: object, body: object, sent: Sent | None = None,
               **headers: str) -> web.StreamResponse:
    key = app[STATE].store.keys.create("acme")[1]
    route = "/v1/messages" if api is messages.API else "/v1/responses"
    return await managed(await routed(app, "POST", route, body=body, sent=sent,
                                      headers={"x-api-key": key, **headers}), api)  # type: ignore


async def test_a_messages_request_is_managed_with_the_anthropic_key(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app(CONTEXT_PROXY_ANTHROPIC_API_KEY="sk-ant-platform")
    out = Sent()
    answer = await call(app, messages.API, MESSAGES, out, **{"anthropic-beta": "b1"})
    assert answer.status == 200 and answer.headers["X-Context-Compaction"] == "none"
    assert json.loads(out.body)["type"] == "message"
    sent = fake_upstream.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-ant-platform"
    assert sent.headers["anthropic-beta"] == "b1" and sent.json == MESSAGES


async def test_a_sequence_the_api_refuses_is_a_400(make_app: App) -> None:
    app = await make_app()
    orphan = {**MESSAGES, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_x", "content": "ok"}]}]}
    with pytest.raises(ApiError) as info:
        await call(app, messages.API, orphan)
    assert (info.value.status, info.value.code) == (400, "invalid_message_sequence")
    with pytest.raises(ApiError) as missing:
        await call(app, messages.API, {"model": "claude-x", "messages": []})
    assert missing.value.param == "max_tokens"


async def test_a_previous_response_keeps_its_history_upstream(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    fake_upstream.faults.append(Fault(status=200, path="/v1/responses", body={
        "object": "response", "id": "resp_2", "output": [], "status": "completed"}))
    body = {"model": "gpt-x", "input": "again", "previous_response_id": "resp_1"}
    out = Sent()
    answer = await call(app, responses.API, body, out)
    assert answer.status == 200 and answer.headers[HISTORY] == "upstream"
    assert json.loads(out.body)["id"] == "resp_2"
    assert fake_upstream.requests[-1].json == body  # as it came


async def test_an_answer_of_another_shape_is_a_502_in_the_apis_shape(
        make_app: App, fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    fake_upstream.faults.append(Fault(status=200, path="/v1/messages",
                                      body={"object": "chat.completion"}))
    answer = await call(app, messages.API, MESSAGES)
    assert answer.status == 502
    assert json.loads(answer.body)["type"] == "error"  # type: ignore[attr-defined]


async def test_the_leg_goes_to_the_apis_upstream_with_its_headers(make_app: App) -> None:
    app = await make_app()
    state = app[STATE]
    who = Principal("acme", None, "key_1", "sk-k")
    raw = json.dumps(MESSAGES).encode()
    job, _ = await manage(state, messages.API, who, {}, raw, dict(MESSAGES))
    leg = leg_for(state, messages.API, {"x-api-key": "cp-client"}, job, "beta=true")
    assert leg.upstream is state.anthropic and leg.path == "/messages"
    assert leg.headers["x-api-key"] == "sk-k" and leg.query == "beta=true"
    assert leg.error_event == messages.STREAM_ERROR and leg.route == "messages"
    assert leg_for(state, responses.API, {}, job).upstream is state.upstream
