"""One test per error class: every failure is OpenAI-shaped with the right status, never a 500."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness


def post(h: Harness, key: str | None, body: bytes, path: str = "/chat/completions"
         ) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(h.base_url + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def assert_openai_error(body: dict[str, Any]) -> dict[str, Any]:
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in err["message"]
    return err


GOOD = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    (b"[1, 2]", None),
    (b"\xff\xfe", None),
    (json.dumps({"model": "gpt-4o"}).encode(), "messages"),
    (json.dumps({"model": "gpt-4o", "messages": "hi"}).encode(), "messages"),
    (json.dumps({"model": "gpt-4o", "messages": {"role": "user"}}).encode(), "messages"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
    (json.dumps({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "x"}]}).encode(),
     "messages[0].role"),
    (json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": 42}]}).encode(),
     "messages[0].content"),
    (json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"x": 1}]}]}
                ).encode(), "messages[0].content[0]"),
    (json.dumps({"model": "gpt-4o", "messages": [{"role": "tool", "content": "x"}]}).encode(),
     "messages[0].tool_call_id"),
    (json.dumps({"model": "gpt-4o", "messages": [
        {"role": "assistant", "content": None, "tool_calls": [{"id": 3}]}]}).encode(),
     "messages[0].tool_calls[0]"),
    (json.dumps(dict(GOOD, stream="yes")).encode(), "stream"),
])
def test_bad_requests_are_400(harness: Harness, key: str, body: bytes, param: str | None) -> None:
    status, resp = post(harness, key, body)
    assert status == 400
    err = assert_openai_error(resp)
    assert err["type"] == "invalid_request_error"
    if param:
        assert err["param"] == param
    assert harness.fake.chat_requests() == []


def test_body_over_limit_is_413(make_harness) -> None:
    h = make_harness(max_body_bytes=10_000)
    big = json.dumps(dict(GOOD, messages=[{"role": "user", "content": "x" * 20_000}])).encode()
    status, resp = post(h, h.create_key(), big)
    assert status == 413
    assert assert_openai_error(resp)["code"] == "request_too_large"
    assert h.fake.chat_requests() == []


def test_body_over_limit_chunked_is_413(make_harness) -> None:
    h = make_harness(max_body_bytes=10_000)
    key = h.create_key()

    def chunks():
        yield b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}]}'

    req = urllib.request.Request(h.base_url + "/chat/completions", data=chunks(), method="POST",
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json",
                                          "Transfer-Encoding": "chunked"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    assert info.value.code == 413
    assert_openai_error(json.loads(info.value.read()))


@pytest.mark.parametrize("auth", [None, "Bearer cp-not-a-key", "Basic abc", "Bearer "])
def test_missing_or_unknown_key_is_401(harness: Harness, auth: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    req = urllib.request.Request(harness.base_url + "/chat/completions",
                                 data=json.dumps(GOOD).encode(), headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    assert info.value.code == 401
    assert_openai_error(json.loads(info.value.read()))
    assert harness.fake.requests == []


def test_sdk_sees_authentication_error(harness: Harness, sdk) -> None:
    c = sdk(harness, "cp-wrong")
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(**GOOD)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_upstream_refusing_connection_is_502(make_harness, sdk) -> None:
    h = make_harness(upstream_url=f"http://127.0.0.1:{_free_port()}/v1")
    c = sdk(h, h.create_key())
    with pytest.raises(openai.InternalServerError) as info:
        c.chat.completions.create(**GOOD)
    assert info.value.status_code == 502
    assert assert_openai_error(info.value.body if "error" in info.value.body
                               else {"error": info.value.body})["code"] == "upstream_unreachable"


def test_upstream_dropping_connection_is_502(make_harness) -> None:
    h = make_harness(fake=FakeUpstream(faults=[Fault(drop=True)]))
    status, resp = post(h, h.create_key(), json.dumps(GOOD).encode())
    assert status == 502
    assert_openai_error(resp)


def test_upstream_timeout_is_504(make_harness) -> None:
    h = make_harness(fake=FakeUpstream(faults=[Fault(delay_s=3, status=200)]),
                     upstream_timeout_s=0.5)
    status, resp = post(h, h.create_key(), json.dumps(GOOD).encode())
    assert status == 504
    assert assert_openai_error(resp)["code"] == "upstream_timeout"


@pytest.mark.parametrize("status", [400, 404, 422, 429])
def test_upstream_4xx_passes_through_with_its_body(make_harness, status: int) -> None:
    body = {"error": {"message": f"upstream says {status}", "type": "invalid_request_error",
                      "param": "model", "code": "model_not_found"}}
    h = make_harness(fake=FakeUpstream(faults=[Fault(status=status, body=body)]))
    got_status, got = post(h, h.create_key(), json.dumps(GOOD).encode())
    assert (got_status, got) == (status, body)


def test_upstream_error_body_never_echoes_the_upstream_key(make_harness) -> None:
    fake = FakeUpstream()
    h = make_harness(fake=fake)
    fake.faults.append(Fault(status=401, body={"error": {
        "message": f"Incorrect API key provided: {h.upstream_key}", "type": "x", "param": None,
        "code": "invalid_api_key"}}))
    status, got = post(h, h.create_key(), json.dumps(GOOD).encode())
    assert status == 401
    assert h.upstream_key not in json.dumps(got)


def test_unknown_route_and_method_are_openai_shaped(harness: Harness, key: str) -> None:
    req = urllib.request.Request(harness.base_url.replace("/v1", "/nope"))
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    assert info.value.code == 404
    assert_openai_error(json.loads(info.value.read()))
    # GET /v1/chat/completions is the upstream's (stored completions) and is relayed;
    # a wrong method on the proxy's own routes is a 405.
    req = urllib.request.Request(harness.base_url.replace("/v1", "/healthz"), data=b"{}",
                                 method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req)
    assert info.value.code == 405
    assert_openai_error(json.loads(info.value.read()))
