"""The fake upstream (``proxy.testing.fake_upstream``) keeps the promises the other tests rely
on: it records what it got, answers like OpenAI (whole, streamed, refusing an over-long
context) and misbehaves exactly as scripted. Driven in process with ``aiohttp_client``."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.context.stages.summary import SUMMARY_SYSTEM_PROMPT
from proxy.testing.fake.faults import BAD_EVENT, HUGE_CHARS
from proxy.testing.fake_upstream import FakeUpstream, Fault, approx_tokens, embed
from proxy.upstream.usage import stated_window

Client = TestClient[web.Request, web.Application]
Start = Callable[[FakeUpstream], Awaitable[Client]]
CHAT = "/v1/chat/completions"
HELLO = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture
def start(aiohttp_client: Callable[[web.Application], Awaitable[Client]]) -> Start:
    async def go(fake: FakeUpstream) -> Client:
        return await aiohttp_client(fake.app())

    return go


async def test_answers_and_records_chat_requests(start: Start) -> None:
    fake = FakeUpstream()
    up = await start(fake)
    resp = await up.post(CHAT, json=HELLO, headers={"Authorization": "Bearer sk-x"})
    body = await resp.json()
    assert body["choices"][0] == {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ack: hello there"}}
    assert body["usage"]["prompt_tokens"] == approx_tokens(HELLO["messages"])
    summary = {"model": "m", "messages": [{"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
                                          {"role": "user", "content": "CODE-12 and BUG-7"}]}
    answer = await (await up.post(CHAT, json=summary)).json()
    assert answer["choices"][0]["message"]["content"] == (
        "Goal: continue the task. Key details: BUG-7, CODE-12.")
    assert fake.chat_requests() == [HELLO]  # the proxy's own summary calls are apart
    assert fake.summary_requests() == [summary]
    assert fake.all_chat_requests() == [HELLO, summary]
    assert fake.requests[0].headers["Authorization"] == "Bearer sk-x"


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/responses", {"model": "m", "input": "hi", "tools": [["a list, not a tool"]]}),
    ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [7]}),
])
async def test_a_body_it_cannot_read_is_refused_400_in_the_apis_shape(
        start: Start, path: str, body: dict[str, Any]) -> None:
    resp = await (await start(FakeUpstream())).post(path, json=body)
    assert resp.status == 400
    error = await resp.json()
    assert (error["type"] == "error") if path == "/v1/messages" else ("code" in error["error"])


async def test_streams_chunks_then_usage_then_done(start: Start) -> None:
    fake = FakeUpstream(stream_chunks=3)
    up = await start(fake)
    resp = await up.post(CHAT, json=dict(HELLO, stream=True,
                                         stream_options={"include_usage": True}))
    assert resp.headers["Content-Type"] == "text/event-stream"
    events = [line.removeprefix("data: ") for line in (await resp.text()).splitlines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks[:-2]]
    assert pieces == ["ack: h", "ello t", "here"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0


async def test_refuses_a_context_over_the_window_like_openai(start: Start) -> None:
    fake = FakeUpstream(models={"small": 10}, enforce_windows=True, usage_scale=2.0)
    up = await start(fake)
    models = await (await up.get("/v1/models")).json()
    assert models["data"][0]["id"] == "small" and models["data"][0]["context_length"] == 10
    resp = await up.post(CHAT, json=dict(HELLO, model="small"))
    assert resp.status == 400
    raw = await resp.read()
    assert json.loads(raw)["error"]["code"] == "context_length_exceeded"
    assert stated_window(raw) == 10  # what the proxy's safety net reads
    assert (await up.post(CHAT, json=dict(HELLO, model="other"))).status == 200


@pytest.mark.parametrize("fault, times", [
    ({"status": 429}, 1),
    ({"status": 200, "body": {"custom": True}}, 1),
    ({"status": 503, "times": 2}, 2),
])
async def test_faults_apply_as_often_as_told(start: Start, fault: dict[str, Any],
                                             times: int) -> None:
    status = fault["status"]
    fake = FakeUpstream(faults=[Fault(**fault)])
    up = await start(fake)
    for _ in range(times):
        resp = await up.post(CHAT, json=HELLO)
        assert resp.status == status
        assert "choices" not in await resp.json()
    assert (await (await up.post(CHAT, json=HELLO)).json())["choices"]  # then answers again


async def test_a_matching_fault_skips_other_requests(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(status=500, match=lambda b: b["model"] == "bad",
                                      times=-1)])
    up = await start(fake)
    assert (await up.post(CHAT, json=HELLO)).status == 200
    for _ in range(3):
        assert (await up.post(CHAT, json=dict(HELLO, model="bad"))).status == 500


async def test_echo_and_embeddings(start: Start) -> None:
    fake = FakeUpstream()
    up = await start(fake)
    resp = await up.put("/v1/files/f-1?status=201&x=2", data=b"abc")
    assert resp.status == 201
    assert await resp.json() == {"method": "PUT", "path": "/v1/files/f-1",
                                 "query": "status=201&x=2", "body_length": 3,
                                 "body_sha256": hashlib.sha256(b"abc").hexdigest()}
    resp = await up.post("/v1/embeddings", json={"model": "e", "input": ["red fox", "Red fox."]})
    data: list[dict[str, Any]] = (await resp.json())["data"]
    assert data[0]["embedding"] == data[1]["embedding"] == embed("red fox")
    vec = embed("a blue whale")
    assert len(vec) == 64 and math.isclose(sum(v * v for v in vec), 1.0)
    assert embed("a blue whale") == vec and embed("zebra") != vec


async def test_page_modes_answer_their_kind_with_the_status_and_headers(start: Start) -> None:
    fake = FakeUpstream(faults=[
        Fault(mode="html", status=502), Fault(mode="text", status=429,
                                              headers={"Retry-After": "7"}),
        Fault(mode="invalid_json", status=200)])
    up = await start(fake)
    html = await up.post(CHAT, json=HELLO)
    assert (html.status, html.content_type) == (502, "text/html")
    assert (await html.text()).startswith("<!DOCTYPE html>")
    text = await up.post(CHAT, json=HELLO)
    assert (text.status, text.content_type, text.headers["Retry-After"]) == (
        429, "text/plain", "7")
    bad = await up.post(CHAT, json=HELLO)
    assert (bad.status, bad.content_type) == (200, "application/json")
    with pytest.raises(ValueError):
        json.loads(await bad.read())
    assert (await (await up.post(CHAT, json=HELLO)).json())["choices"]


async def test_reset_promises_a_length_and_sends_half(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(mode="reset", status=200), Fault(mode="reset")])
    up = await start(fake)
    for status in (200, 500):
        resp = await up.post(CHAT, json=HELLO)
        assert resp.status == status and resp.content_length
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    fake.faults.append(Fault(mode="reset", status=200))
    stream = await up.post(CHAT, json=dict(HELLO, stream=True))
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async for chunk in stream.content.iter_any():
            got += chunk
    assert got.count(b"\n\n") == 1  # the first event, then the connection closed
    assert json.loads(got.removeprefix(b"data: "))["choices"][0]["delta"]["content"]


async def test_truncated_json_is_a_whole_answer_of_half_the_json(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(mode="truncated_json", status=200)])
    up = await start(fake)
    resp = await up.post(CHAT, json=HELLO)
    raw = await resp.read()
    assert resp.status == 200 and resp.content_length == len(raw)
    assert raw.startswith(b'{"id": "chatcmpl-fake"')
    with pytest.raises(ValueError):
        json.loads(raw)


async def test_bad_sse_adds_a_data_line_that_is_not_json(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(mode="bad_sse", status=200)], stream_chunks=3)
    up = await start(fake)
    text = await (await up.post(CHAT, json=dict(HELLO, stream=True))).text()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[1] == BAD_EVENT.decode().strip().removeprefix("data: ")
    assert json.loads(events[0]) and json.loads(events[2]) and events[-1] == "[DONE]"


async def test_huge_and_drip_answer_normally_in_size_and_pace(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(mode="huge", status=200), Fault(mode="drip", status=200),
                                Fault(mode="drip", status=200)])
    up = await start(fake)
    huge = await (await up.post(CHAT, json=HELLO)).json()
    assert len(huge["choices"][0]["message"]["content"]) == HUGE_CHARS
    resp = await up.post(CHAT, json=HELLO)
    pieces = [chunk async for chunk in resp.content.iter_any()]
    assert len(pieces) > 5  # written 16 bytes at a time, a pause apart
    assert json.loads(b"".join(pieces))["choices"][0]["message"]["content"] == "ack: hello there"
    stream = await up.post(CHAT, json=dict(HELLO, stream=True))
    pieces = [chunk async for chunk in stream.content.iter_any()]
    assert len(pieces) > 5 and b"".join(pieces).endswith(b"data: [DONE]\n\n")


async def test_faults_of_other_paths_leave_chat_alone(start: Start) -> None:
    fake = FakeUpstream(faults=[Fault(path="/v1/models", mode="html", status=502),
                                Fault(path="/v1/embeddings", mode="reset", status=200)])
    up = await start(fake)
    assert (await up.post(CHAT, json=HELLO)).status == 200
    models = await up.get("/v1/models")
    assert (models.status, models.content_type) == (502, "text/html")
    emb = await up.post("/v1/embeddings", json={"model": "e", "input": "x"})
    with pytest.raises(aiohttp.ClientPayloadError):
        await emb.read()
    assert (await up.get("/v1/models")).status == 200
