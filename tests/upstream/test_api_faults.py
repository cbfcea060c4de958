"""Upstream faults on the Messages and Responses routes come back in each API's own shape: an
error body that is not JSON (a gateway's HTML page) is the proxy's own error, shaped as the API
shapes errors, streamed or not; an answer that ends early, chunked or with no framing at all
(its end a FIN or a reset), ends a stream with the API's error event and is a 502 whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness

BODIES = {MESSAGES: {"model": "m", "max_tokens": 8,
                     "messages": [{"role": "user", "content": "hi"}]},
          RESPONSES: {"model": "m", "input": "hi"}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize(("mode", "status"), [("html", 502), ("text", 500), ("html", 404)])
def test_a_non_json_upstream_error_is_in_the_apis_shape(
        make_harness: Callable[..., Harness], path: str, stream: bool, mode: str,
        status: int) -> None:
    fake = FakeUpstream(faults=[Fault(mode=mode, status=status, path=path)])
    h = make_harness(fake=fake)
    key = h.create_key("acme")
    resp = requests.post(h.base_url + path.removeprefix("/v1"), timeout=30,
                         json={**BODIES[path], "stream": stream},
                         headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == (502 if status == 500 else status)
    body: dict[str, Any] = resp.json()
    message = f"The upstream answered {status} with a non-JSON body"
    if path == MESSAGES:
        assert body["type"] == "error" and body["error"]["message"].startswith(message)
        assert body["error"]["type"] in ("api_error", "not_found_error")
    else:
        assert body["error"]["code"] == "upstream_non_json_error"
        assert body["error"]["message"].startswith(message)
    assert "x-context-compaction" in resp.headers


@pytest.mark.parametrize(("path", "ending"), [
    ("/v1/chat/completions", b'data: {"error": '),
    (MESSAGES, b"event: error\ndata: "),
    (RESPONSES, b'data: {"error": ')])
def test_a_stream_that_ends_before_its_final_event_ends_with_the_apis_error_event(
        make_harness: Callable[..., Harness], path: str, ending: bytes) -> None:
    # The body ended cleanly (no reset): only the missing final event ([DONE], message_stop,
    # response.completed) says the answer is partial; the client must not take it as whole.
    fake = FakeUpstream(faults=[Fault(mode="early_end", status=200, path=path)])
    h = make_harness(fake=fake)
    key = h.create_key("acme")
    body = BODIES.get(path, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    resp = requests.post(h.base_url + path.removeprefix("/v1"), timeout=30,
                         json={**body, "stream": True}, headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 200
    last = resp.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(ending), resp.content[-300:]
    whole = requests.post(h.base_url + path.removeprefix("/v1"), timeout=30,
                          json={**body, "stream": True},
                          headers={"Authorization": f"Bearer {key}"})  # the fault is spent
    assert b"upstream stream ended" not in whole.content


@pytest.mark.parametrize("mode", ["unframed_fin", "unframed_reset"])
@pytest.mark.parametrize(("path", "ending"), [
    ("/v1/chat/completions", b'data: {"error": '),
    (MESSAGES, b"event: error\ndata: "),
    (RESPONSES, b'data: {"error": ')])
def test_an_answer_without_framing_that_ends_early_is_an_error_in_the_apis_shape(
        make_harness: Callable[..., Harness], path: str, ending: bytes, mode: str) -> None:
    # No Content-Length, no chunks: the connection's end is the body's, so a FIN looks like a
    # clean end; only the missing final event (or the JSON cut short) says it is not.
    fake = FakeUpstream(faults=[Fault(mode=mode, status=200, path=path, times=-1)])
    h = make_harness(fake=fake)
    key = h.create_key("acme")
    body = BODIES.get(path, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    url, auth = h.base_url + path.removeprefix("/v1"), {"Authorization": f"Bearer {key}"}
    streamed = requests.post(url, timeout=30, json={**body, "stream": True}, headers=auth)
    assert streamed.status_code == 200
    assert streamed.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1].startswith(ending)
    whole = requests.post(url, timeout=30, json=body, headers=auth)
    assert whole.status_code == 502
    error = whole.json()
    assert error["type"] == "error" if path == MESSAGES else error["error"]["code"].startswith(
        "upstream_")
