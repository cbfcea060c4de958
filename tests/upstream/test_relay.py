"""Relaying upstream answers (``proxy.upstream.relay``) read from the fake upstream: whole bodies
read in full or refused cleanly (broken, stalled, over the cap), error bodies relayed when JSON
(scrubbed of the key) and replaced when not, and which answers ``relay`` reads whole."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from proxy.errors import ApiError
from proxy.testing.fake import faults
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.upstream.answers import unusable_completion
from proxy.upstream.client import Upstream
from proxy.upstream.relay import (
    PROXY_MADE,
    answer_whole,
    error_response,
    is_encoded,
    is_event_stream,
    read_body,
    relay,
    relay_whole,
)

KEY = "sk-upstream-relay-0123456789"
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def served(upstream_client: tuple[FakeUpstream, Upstream]) -> tuple[FakeUpstream, Upstream]:
    fake, client = upstream_client
    client.api_key, client.first_byte_timeout_s = KEY, 0.5  # before its first call
    return fake, client


async def post(upstream: Upstream, body: object = CHAT) -> aiohttp.ClientResponse:
    return await upstream.open("POST", "/chat/completions",
                               {"Authorization": f"Bearer {KEY}",
                                "Content-Type": "application/json"}, json.dumps(body))


async def test_a_whole_body_is_read_and_answered_with_extra_headers(
        served: tuple[FakeUpstream, Upstream]) -> None:
    _, upstream = served
    resp = await post(upstream)
    assert not is_event_stream(resp) and not is_encoded(resp)
    answer = await relay_whole(upstream, resp, {"X-Context-Tokens-Before": "9"},
                               check=unusable_completion)
    assert answer.status == 200 and answer.headers["X-Context-Tokens-Before"] == "9"
    assert json.loads(answer.body)["choices"][0]["message"]["content"] == "ack: hi"


@pytest.mark.parametrize(("fault", "status", "code"), [
    (Fault(status=200, mode="reset"), 502, "upstream_broken"),
    (Fault(status=200, mode="drip"), 504, "upstream_timeout"),
    (Fault(status=200, mode="huge"), 502, "upstream_answer_too_large"),
    (Fault(status=500, mode="html"), 502, "upstream_non_json_error"),
    (Fault(status=200, mode="truncated_json"), 502, "upstream_invalid_answer")])
async def test_an_unusable_body_is_a_clean_error(
        served: tuple[FakeUpstream, Upstream], fault: Fault, status: int, code: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, upstream = served
    if fault.mode == "drip":  # the headers come at once, then the body stalls past the timeout
        monkeypatch.setattr(faults, "DRIP_PAUSE_S", 2.0)
        upstream.first_byte_timeout_s = 0.5
    fake.faults.append(fault)
    answer = await relay_whole(upstream, await post(upstream), {"X-Context-Compaction": "none"},
                               check=unusable_completion, cap=1 << 20)
    assert (answer.status, json.loads(answer.body)["error"]["code"]) == (status, code)
    assert answer[PROXY_MADE] and answer.headers["X-Context-Compaction"] == "none"


async def test_read_body_raises_the_clean_error(served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    fake.faults.append(Fault(status=200, mode="reset"))
    with pytest.raises(ApiError) as info:
        await read_body(await post(upstream))
    assert info.value.code == "upstream_broken"
    fake.faults.append(Fault(status=429, mode="huge", body={"error": {"message": "x" * 5000}}))
    with pytest.raises(ApiError) as big:
        await read_body(await post(upstream), cap=1000)
    assert (big.value.status, big.value.code) == (429, "upstream_answer_too_large")


async def test_a_json_error_is_relayed_without_the_key(
        served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    fake.faults.append(Fault(status=401, mode="echo"))
    answer = await relay_whole(upstream, await post(upstream))
    assert answer.status == 401 and KEY.encode() not in answer.body
    assert b"[redacted]" in answer.body and "X-Debug-Authorization" not in answer.headers
    fake.faults.append(Fault(status=200, mode="echo_gzip"))
    resp = await post(upstream)
    assert is_encoded(resp)
    decoded = answer_whole(upstream, resp, await read_body(resp))
    assert "Content-Encoding" not in decoded.headers  # looked into, so relayed decoded
    assert KEY.encode() not in decoded.body and b"[redacted]" in decoded.body


def test_error_response_drops_the_headers_of_the_upstreams_body() -> None:
    answer = error_response(ApiError(502, "broke", code="upstream_broken"),
                            {"Content-Encoding": "gzip", "ETag": "x", "Retry-After": "2"})
    assert answer.status == 502 and answer.headers["Content-Type"] == "application/json"
    assert "Content-Encoding" not in answer.headers and "ETag" not in answer.headers
    assert answer.headers["Retry-After"] == "2"
    assert json.loads(answer.body) == {"error": {"message": "broke", "type": "upstream_error",
                                                 "param": None, "code": "upstream_broken"}}


async def test_relay_reads_errors_and_small_bodies_whole(
        served: tuple[FakeUpstream, Upstream]) -> None:
    fake, upstream = served
    request = make_mocked_request("POST", "/v1/chat/completions")
    fake.faults.append(Fault(status=503, mode="text"))
    answer = await relay(request, upstream, await post(upstream))
    assert answer.status == 503 and answer[PROXY_MADE]  # the text page replaced, 503 kept
    small = await relay(request, upstream, await post(upstream))
    assert small.status == 200 and PROXY_MADE not in small

