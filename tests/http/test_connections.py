"""What reaches the log when clients misbehave at the HTTP level: never a key, never an ERROR
for a client that simply went away."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from proxy.http.middleware import route_label
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric


def port_of(h: Harness) -> int:
    return int(h.base_url.split(":")[2].split("/")[0])


def send_raw(h: Harness, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port_of(h)), timeout=5) as s:
        s.sendall(data)
        return s.recv(4096) if read else b""


def test_a_control_character_in_the_key_header_never_reaches_the_log(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk-client-secret-4242"
    answer = send_raw(harness, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Authorization: Bearer " + secret.encode() + b"\x01x\r\n"
                      b"Content-Length: 2\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400")
    time.sleep(0.2)
    assert secret not in caplog.text and "Traceback" not in caplog.text
    refused = [r for r in caplog.records if "malformed HTTP request" in r.getMessage()]
    assert refused and all(r.levelno == logging.WARNING for r in refused)


def test_a_client_that_leaves_mid_body_is_no_error(harness: Harness, key: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    send_raw(harness, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 100000\r\n\r\n"
             b'{"model": "m", ', read=False)
    time.sleep(0.3)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [] and "client closed the connection" in caplog.text
    text = harness.state.metrics.render().decode()
    assert 'status_class="5xx"' not in text
    assert metric(text, "context_proxy_requests_total", route="chat", status_class="4xx") == 1


def test_the_proxy_keeps_serving_after_both(harness: Harness, client: Any) -> None:
    send_raw(harness, b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad\x01Header: y\r\n\r\n")
    answer = client.chat.completions.create(model="gpt-4o",
                                            messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content


def test_credential_headers_the_upstream_echoes_are_not_relayed() -> None:
    from multidict import CIMultiDict, CIMultiDictProxy

    from proxy.upstream.client import response_headers

    upstream = CIMultiDictProxy(CIMultiDict({
        "Content-Type": "application/json", "Authorization": "Bearer sk-upstream",
        "Proxy-Authorization": "Basic x", "X-Api-Key": "sk-upstream", "api-key": "k",
        "X-Request-Id": "r1"}))
    assert dict(response_headers(upstream)) == {"Content-Type": "application/json",
                                                "X-Request-Id": "r1"}


def test_every_answer_carries_a_request_id(harness: Harness, client: Any) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Request-Id": "trace-4711"})
    assert raw.headers["X-Request-Id"] == "trace-4711"
    own = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    generated = own.headers["X-Request-Id"]
    assert len(generated) == 16 and int(generated, 16) >= 0
    with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers={"X-Request-Id": "x" * 129}) as streamed:  # too long: a new one
        assert len(streamed.headers["X-Request-Id"]) == 16
        list(streamed.iter_lines())
    answer = send_raw(harness, b"GET /nowhere HTTP/1.1\r\nHost: x\r\nX-Request-Id: r-1\r\n\r\n")
    assert b"X-Request-Id: r-1" in answer and answer.startswith(b"HTTP/1.1 404")


def test_a_request_refused_before_routing_has_the_route_unmatched() -> None:
    # aiohttp never routes a request its parser refuses: the access logger names its route
    # without one (a failure there would be printed by logging as a traceback, past caplog).
    request = make_mocked_request("GET", "/x")
    request._match_info = None  # as aiohttp leaves a request it never routed
    assert route_label(request) == "unmatched"
