"""The upstream client (``proxy.upstream.client``): which headers go upstream and come back,
and how an unreachable or slow upstream becomes a 502 or a 504 counted in the metrics."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.errors import ApiError
from proxy.metrics import Metrics
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.scrape import metric
from proxy.upstream.client import (
    Upstream,
    current_key,
    fetch_models,
    forwarding_conversation_id,
    request_headers,
    response_headers,
)

INCOMING = {"Authorization": "Bearer cp-client", "x-api-key": "cp-client", "Cookie": "c=1",
            "Connection": "keep-alive, X-Hop", "X-Hop": "1", "Host": "proxy", "Content-Length": "9",
            "X-Conversation-Id": "ticket-1", "X-Context-Compact": "true", "Accept": "*/*",
            "Accept-Encoding": "gzip", "OpenAI-Beta": "assistants=v2"}


def test_request_headers_drop_credentials_hops_and_the_proxys_own() -> None:
    out = request_headers(INCOMING, "sk-upstream")
    assert dict(out) == {"Accept": "*/*", "Accept-Encoding": "gzip",
                         "OpenAI-Beta": "assistants=v2", "Authorization": "Bearer sk-upstream"}
    plain = request_headers(INCOMING, None, identity=True)
    assert plain["Accept-Encoding"] == "identity" and "Authorization" not in plain


def test_the_conversation_id_goes_upstream_only_when_the_platform_says_so() -> None:
    out = request_headers(INCOMING, None)
    assert "X-Conversation-Id" not in forwarding_conversation_id(out, INCOMING, False)
    assert forwarding_conversation_id(out, INCOMING, True)["X-Conversation-Id"] == "ticket-1"


def test_response_headers_drop_echoed_credentials_and_the_secret() -> None:
    upstream = CIMultiDictProxy(CIMultiDict([
        ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked"),
        ("Authorization", "Bearer x"), ("X-Debug", "key=sk-upstream"), ("Retry-After", "3"),
        ("Connection", "X-Drop"), ("X-Drop", "1"), ("ETag", "e")]))
    assert dict(response_headers(upstream, drop=["ETag"], secret="sk-upstream")) == {
        "Content-Type": "application/json", "Retry-After": "3"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    f = FakeUpstream(models={"m-32k": 32_768})
    await f.start()
    yield f
    await f.stop()


async def test_open_answers_and_counts_error_statuses(fake: FakeUpstream) -> None:
    metrics = Metrics()
    upstream = Upstream(fake.base_url + "/", "sk-upstream", 5.0, metrics)
    try:
        assert upstream.url("/models") == fake.base_url + "/models"
        fake.faults.append(Fault(status=429, path="/v1/models"))
        resp = await upstream.open("GET", "/models", {}, route="models")
        resp.release()
        assert resp.status == 429
        text = metrics.render().decode()
        assert metric(text, "context_proxy_upstream_errors_total", route="models",
                      status="429") == 1
        assert metric(text, "context_proxy_upstream_time_to_first_byte_seconds_count",
                      route="models") == 1
        assert upstream.secret == b"sk-upstream"
    finally:
        await upstream.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_upstream_is_a_502_and_a_slow_one_a_504(fake: FakeUpstream) -> None:
    metrics = Metrics()
    gone = Upstream(f"http://127.0.0.1:{_closed_port()}/v1", None, 5.0, metrics)
    slow = Upstream(fake.base_url, None, 0.2, metrics)
    fake.faults.append(Fault(status=200, delay_s=1.0, path="/v1/models"))
    try:
        with pytest.raises(ApiError) as unreachable:
            await gone.open("GET", "/models", {}, route="chat")
        assert (unreachable.value.status, unreachable.value.code) == (502, "upstream_unreachable")
        with pytest.raises(ApiError) as timeout:
            await slow.open("GET", "/models", {}, route="chat")
        assert (timeout.value.status, timeout.value.code) == (504, "upstream_timeout")
        text = metrics.render().decode()
        for status in ("unreachable", "timeout"):
            assert metric(text, "context_proxy_upstream_errors_total", status=status) == 1
        gone.end_waits()  # shutting down: a refused connection is the shutdown's 503 now
        with pytest.raises(ApiError) as stopping:
            await gone.open("GET", "/models", {})
        assert (stopping.value.status, stopping.value.code) == (503, "shutting_down")
    finally:
        await gone.close()
        await slow.close()


async def test_fetch_models_uses_the_callers_key_without_one_of_its_own(
        fake: FakeUpstream) -> None:
    upstream = Upstream(fake.base_url, None, 5.0)
    token = current_key.set("sk-caller")
    try:
        models = await fetch_models(upstream)
        assert {m["id"] for m in models["data"]} >= {"m-32k"}
        assert fake.requests[-1].headers["Authorization"] == "Bearer sk-caller"
        fake.faults.append(Fault(status=500, path="/v1/models"))
        with pytest.raises(RuntimeError, match="answered 500"):
            await fetch_models(upstream)
    finally:
        current_key.reset(token)
        await upstream.close()
