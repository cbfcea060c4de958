"""The upstream key never reaches a client, a log line or /metrics, whatever the upstream
echoes: in a header, in a whole body, in one split across many chunks, gzip-compressed, or past
a MiB; on chat, embeddings, models, rerank and a catch-all route."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
from typing import Any

import pytest

from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing.fake.faults import Fault
from proxy.testing.fake_upstream import FakeUpstream

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
ROUTES = {  # name: (method, path, body, the upstream path the fault is set on)
    "chat": ("POST", "/v1/chat/completions", CHAT, "/v1/chat/completions"),
    "chat-stream": ("POST", "/v1/chat/completions", {**CHAT, "stream": True},
                    "/v1/chat/completions"),
    "embeddings": ("POST", "/v1/embeddings", {"model": "e", "input": ["a"]}, "/v1/embeddings"),
    "models": ("GET", "/v1/models", None, "/v1/models"),
    "rerank": ("POST", "/v1/rerank", {"query": "q", "documents": [f"d{i}" for i in range(12)]},
               "/v1/chat/completions"),
    "catch-all": ("GET", "/v1/files/file-1/content", None, "/v1/files/file-1/content"),
}
RERANK_ON = PlatformConfig(defaults=validate_layer({"rerank.enabled": True,
                                                    "rerank.model": "gpt-4o"}))


def call(h: Any, key: str, method: str, path: str, body: Any) -> tuple[int, str, bytes]:
    port = int(h.base_url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        headers = "\n".join(f"{k}: {v}" for k, v in resp.getheaders())
        if resp.getheader("Content-Encoding", "") == "gzip":
            data = gzip.decompress(data)
        return resp.status, headers, data
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["echo", "echo_drip", "echo_gzip", "echo_huge"])
@pytest.mark.parametrize("status", [200, 401, 500])
@pytest.mark.parametrize("route", list(ROUTES))
def test_the_upstream_key_never_reaches_a_client_a_log_or_metrics(
        make_harness: Any, caplog: pytest.LogCaptureFixture, route: str, status: int,
        mode: str) -> None:
    caplog.set_level(logging.DEBUG)
    method, path, body, upstream_path = ROUTES[route]
    fake = FakeUpstream(faults=[Fault(mode=mode, status=status, path=upstream_path, times=-1)])
    h = make_harness(fake=fake, platform=RERANK_ON)
    secret = h.upstream_key
    got_status, headers, data = call(h, h.create_key(), method, path, body)
    assert fake.requests and any(r.headers.get("Authorization") == f"Bearer {secret}"
                                 for r in fake.requests)  # the upstream did get the key
    assert secret not in headers
    assert secret.encode() not in data
    assert secret not in caplog.text
    assert secret.encode() not in h.state.metrics.render()
    assert got_status < 500 or data.startswith(b"{") or b"data:" in data


@pytest.mark.parametrize("route", ["chat-stream", "catch-all"])
def test_a_gzip_stream_echoing_the_key_is_relayed_decoded_and_scrubbed(
        make_harness: Any, route: str) -> None:
    # The stream scrubber looks into a compressed stream as the whole-body one does.
    method, path, body, upstream_path = ROUTES[route]
    fake = FakeUpstream(faults=[Fault(mode="echo_gzip_stream", path=upstream_path, times=-1)])
    h = make_harness(fake=fake)
    got_status, headers, data = call(h, h.create_key(), method, path, body)
    assert got_status == 200 and "Content-Encoding: gzip" not in headers
    assert h.upstream_key.encode() not in data and b"you sent [redacted]" in data
    assert data.rstrip().endswith(b"data: [DONE]")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_a_gzip_answer_of_another_api_is_read_decoded_scrubbed_and_counted(
        make_harness: Any, path: str, stream: bool) -> None:
    # Read decoded like chat's: the key scrubbed, the final event found, the usage booked.
    mode = "echo_gzip_stream" if stream else "echo_gzip"
    fake = FakeUpstream(faults=[Fault(mode=mode, status=200, path=path, times=-1)])
    h = make_harness(fake=fake)
    body: dict[str, Any] = {"model": "m", "input": "hi", "stream": stream} \
        if path == "/v1/responses" else {"model": "m", "max_tokens": 8, "stream": stream,
                                          "messages": [{"role": "user", "content": "hi"}]}
    got_status, headers, data = call(h, h.create_key(), "POST", path, body)
    assert got_status == 200 and "Content-Encoding: gzip" not in headers
    secret = (h.state.anthropic if path == "/v1/messages" else h.state.upstream).secret
    assert secret and secret in fake.requests[-1].headers.get("x-api-key", "").encode() + \
        fake.requests[-1].headers.get("Authorization", "").encode()  # the upstream got it
    assert secret not in data and secret.decode() not in headers and b"[redacted]" in data
    if stream:
        final = b"message_stop" if path == "/v1/messages" else b"response.completed"
        assert final in data.rstrip().rsplit(b"\n\n", 1)[-1]
    assert h.metric("context_proxy_upstream_prompt_tokens_total", model="m") > 0
