"""Broken upstreams map to clean errors: each fault mode of the fake upstream, through the real
proxy and the openai SDK, whole and streamed. The client gets the right status and an
OpenAI-shaped JSON error (or, mid-stream, the SSE error event), never a 500 or the upstream's
HTML, and the proxy keeps serving. The line checker of streams is tested on its own below."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.apis import APIS
from proxy.apis.calls import ApiUsageScanner
from proxy.testing.fake.faults import HUGE_CHARS
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness
from proxy.upstream.answers import (
    EventCheck,
    error_status,
    is_bad_data_line,
    unusable_completion,
    unusable_error,
)

Sdk = Callable[[Harness, str], openai.OpenAI]
MSG = [{"role": "user", "content": "hello there"}]
ERROR_KEYS = {"message", "type", "param", "code"}


def start(make_harness: Callable[..., Harness], sdk: Sdk, *faults: Fault,
          **fake: Any) -> tuple[Harness, openai.OpenAI]:
    h = make_harness(fake=FakeUpstream(faults=list(faults), **fake))
    return h, sdk(h, h.create_key())


def status_error(call: Callable[[], object]) -> openai.APIStatusError:
    """The SDK's error for ``call``, checked to be a clean OpenAI-shaped JSON error."""
    with pytest.raises(openai.APIStatusError) as info:
        call()
    err = info.value
    assert err.status_code != 500
    assert err.response.headers["content-type"].startswith("application/json")
    assert "<" not in err.response.text  # never the upstream's HTML
    body = err.response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS
    return err


def still_serves(c: openai.OpenAI) -> None:
    assert c.chat.completions.create(model="gpt-4o", messages=MSG).choices[0].message.content \
        == "ack: hello there"
    stream = c.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in stream) == "ack: hello there"


def chat(c: openai.OpenAI, **kw: Any) -> Callable[[], object]:
    return lambda: c.chat.completions.create(model="gpt-4o", messages=MSG, **kw)


# --- whole answers on the chat path ------------------------------------------------------------


# (fault, status answered, code): 200s that are no chat completion, then non-JSON error bodies.
WHOLE: list[tuple[dict[str, Any], int, str]] = [
    ({"mode": "reset", "status": 200}, 502, "upstream_broken"),
    ({"mode": "truncated_json", "status": 200}, 502, "upstream_invalid_answer"),
    ({"mode": "invalid_json", "status": 200}, 502, "upstream_invalid_answer"),
    ({"mode": "html", "status": 200}, 502, "upstream_invalid_answer"),
    ({"status": 200, "body": {"object": "chat.completion"}}, 502, "upstream_invalid_answer"),
    ({"mode": "html", "status": 502}, 502, "upstream_non_json_error"),
    ({"mode": "text", "status": 500}, 502, "upstream_non_json_error"),
    ({"mode": "invalid_json", "status": 500}, 502, "upstream_non_json_error"),
    ({"mode": "truncated_json", "status": 500}, 502, "upstream_non_json_error"),
    ({"mode": "text", "status": 503}, 503, "upstream_non_json_error"),
    ({"mode": "html", "status": 504}, 504, "upstream_non_json_error"),
    ({"mode": "html", "status": 404}, 404, "upstream_non_json_error"),
    ({"mode": "text", "status": 401}, 401, "upstream_non_json_error"),
]
# A streamed request gets the same whole answers but for two: asked to stream, the fake streams
# instead (a reset stream is tested below; "truncated_json" has no streamed form).
STREAMED = [case for case in WHOLE if case[0]["status"] != 200
            or case[0].get("mode") not in ("reset", "truncated_json")]


def _id(case: tuple[dict[str, Any], int, str]) -> str:
    return f"{case[0].get('mode') or 'json'}-{case[0]['status']}"


CASES = [(c, False) for c in WHOLE] + [(c, True) for c in STREAMED]


@pytest.mark.parametrize("case, stream", CASES,
                         ids=[f"{_id(c)}-{'streamed' if s else 'whole'}" for c, s in CASES])
def test_broken_whole_answers_are_clean_errors(make_harness: Any, sdk: Sdk, stream: bool,
                                               case: tuple[dict[str, Any], int, str]) -> None:
    fault, status, code = case
    _, c = start(make_harness, sdk, Fault(**fault))
    err = status_error(chat(c, stream=stream))
    assert (err.status_code, err.code) == (status, code)
    assert "x-context-compaction" in err.response.headers  # the X-Context-* headers stay
    if code == "upstream_non_json_error":
        assert f"answered {fault['status']} with a non-JSON body" in err.message
    still_serves(c)


def test_a_reset_error_body_on_the_chat_path_is_a_502(make_harness: Any, sdk: Sdk) -> None:
    _, c = start(make_harness, sdk, Fault(mode="reset", status=500))
    assert status_error(chat(c)).code == "upstream_broken"


def test_an_html_page_names_its_status_and_type_never_its_content(make_harness: Any,
                                                                   sdk: Sdk) -> None:
    _, c = start(make_harness, sdk, Fault(mode="html", status=502))
    err = status_error(chat(c))
    assert isinstance(err, openai.InternalServerError)
    assert err.response.json()["error"] == {
        "message": "The upstream answered 502 with a non-JSON body (text/html).",
        "type": "upstream_error", "param": None, "code": "upstream_non_json_error"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("mode", ["text", ""])
def test_429_keeps_its_status_and_retry_after(make_harness: Any, sdk: Sdk, stream: bool,
                                              mode: str) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit_error", "param": None,
                      "code": "rate_limit_exceeded"}}
    _, c = start(make_harness, sdk, Fault(status=429, mode=mode, body=None if mode else body,
                                          headers={"Retry-After": "7"}))
    err = status_error(chat(c, stream=stream))
    assert isinstance(err, openai.RateLimitError) and err.status_code == 429
    assert err.response.headers["retry-after"] == "7"
    if mode:
        assert err.type == "rate_limit_error" and err.code == "upstream_non_json_error"
    else:
        assert err.response.json() == body  # a JSON error body is relayed as it is
    still_serves(c)


def test_huge_and_dripped_whole_answers_come_through_intact(make_harness: Any,
                                                           sdk: Sdk) -> None:
    _, c = start(make_harness, sdk, Fault(mode="huge", status=200),
                 Fault(mode="drip", status=200))
    huge = c.chat.completions.create(model="gpt-4o", messages=MSG).choices[0].message.content
    assert huge is not None and len(huge) == HUGE_CHARS and huge.startswith("0123456789abcdef")
    dripped = c.chat.completions.create(model="gpt-4o", messages=MSG)
    assert dripped.choices[0].message.content == "ack: hello there"
    still_serves(c)


# --- streams on the chat path ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bad_sse", "reset"])
def test_a_broken_stream_ends_with_the_sse_error_event(make_harness: Any, sdk: Sdk,
                                                       mode: str) -> None:
    _, c = start(make_harness, sdk, Fault(mode=mode, status=200), stream_chunks=3)
    got: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in c.chat.completions.create(model="gpt-4o", messages=MSG, stream=True):
            got.append(chunk.choices[0].delta.content or "")
    assert not isinstance(info.value, openai.APIStatusError)  # the 200 was already sent
    assert got == ["ack: h"]  # the event before the fault, nothing after it
    assert info.value.code == "upstream_broken"
    assert "ended unexpectedly" in info.value.message
    still_serves(c)


def test_raw_stream_stops_before_the_bad_line(make_harness: Any) -> None:
    h = make_harness(fake=FakeUpstream(faults=[Fault(mode="bad_sse", status=200)]))
    req = urllib.request.Request(
        h.base_url + "/chat/completions", method="POST",
        data=json.dumps({"model": "gpt-4o", "messages": MSG, "stream": True}).encode(),
        headers={"Authorization": f"Bearer {h.create_key()}",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        lines = [line for line in resp.read().decode().split("\n") if line]
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data:")]
    assert "not json" not in "".join(lines) and "[DONE]" not in data
    assert json.loads(data[0])["choices"][0]["delta"]["content"]
    assert json.loads(data[-1])["error"]["code"] == "upstream_broken"
    assert len(data) == 2


@pytest.mark.parametrize("chunks", [1, 4])  # one line over EventCheck.MAX_LINE, or four under
def test_huge_stream_comes_through_intact(make_harness: Any, sdk: Sdk, chunks: int) -> None:
    _, c = start(make_harness, sdk, Fault(mode="huge", status=200), stream_chunks=chunks)
    stream = c.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert len(text) == HUGE_CHARS and text.startswith("0123456789abcdef")


def test_dripped_stream_is_relayed_chunk_by_chunk_and_usage_read(make_harness: Any,
                                                                 sdk: Sdk) -> None:
    h, c = start(make_harness, sdk, Fault(mode="drip", status=200), stream_delay_s=0.3,
                 stream_chunks=4)
    began = time.monotonic()
    stream = c.chat.completions.create(model="gpt-4o", messages=MSG, stream=True,
                                       stream_options={"include_usage": True})
    arrivals, chunks = [], []
    for chunk in stream:
        arrivals.append(time.monotonic() - began)
        chunks.append(chunk)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) \
        == "ack: hello there"
    assert arrivals[-1] - arrivals[0] >= 0.8  # 0.3 s between the fake's 4 deltas: not buffered
    reported = h.fake.requests[-1].usage
    assert reported is not None and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == reported["prompt_tokens"]
    # The proxy books the usage once the stream ended: h.metric waits for that.
    assert h.metric("context_proxy_upstream_prompt_tokens_total") == reported["prompt_tokens"]


# --- relayed routes ---------------------------------------------------------------------------


@pytest.mark.parametrize("fault, status, code", [
    ({"mode": "html", "status": 502}, 502, "upstream_non_json_error"),
    ({"mode": "reset", "status": 200}, 502, "upstream_broken"),
    ({"mode": "reset", "status": 500}, 502, "upstream_broken"),
    ({"mode": "text", "status": 503}, 503, "upstream_non_json_error"),
], ids=["html-502", "reset-200", "reset-500", "text-503"])
def test_relayed_models_faults_are_clean_errors(make_harness: Any, sdk: Sdk,
                                                fault: dict[str, Any], status: int,
                                                code: str) -> None:
    _, c = start(make_harness, sdk, Fault(path="/v1/models", **fault), models={"m": 1000})
    err = status_error(lambda: c.models.list())
    assert (err.status_code, err.code) == (status, code)
    assert [m.id for m in c.models.list()] == ["m"]
    still_serves(c)


@pytest.mark.parametrize("fault, status, code", [
    ({"mode": "reset", "status": 200}, 502, "upstream_broken"),
    ({"mode": "html", "status": 500}, 502, "upstream_non_json_error"),
    ({"mode": "text", "status": 429, "headers": {"Retry-After": "3"}}, 429,
     "upstream_non_json_error"),
    ({"status": 429, "body": {"error": {"message": "x" * (2 << 20)}}}, 429,
     "upstream_answer_too_large"),
], ids=["reset-200", "html-500", "text-429", "json-over-cap"])
def test_relayed_embeddings_faults_are_clean_errors(make_harness: Any, sdk: Sdk,
                                                    fault: dict[str, Any], status: int,
                                                    code: str) -> None:
    _, c = start(make_harness, sdk, Fault(path="/v1/embeddings", **fault))
    err = status_error(lambda: c.embeddings.create(model="e", input=["red fox"]))
    assert (err.status_code, err.code) == (status, code)
    if "headers" in fault:
        assert err.response.headers["retry-after"] == "3"
    assert len(c.embeddings.create(model="e", input=["red fox"]).data) == 1
    still_serves(c)


def test_relayed_routes_keep_relaying_200_bodies_as_they_are(make_harness: Any) -> None:
    h = make_harness(fake=FakeUpstream(faults=[Fault(path="/v1/models", mode="invalid_json",
                                                     status=200)]))
    req = urllib.request.Request(h.base_url + "/models",
                                 headers={"Authorization": f"Bearer {h.create_key()}"})
    with urllib.request.urlopen(req) as resp:
        assert resp.read() == b'{"id": "chatcmpl-fake", "choices": [oops]}'


# --- the line checker and the status mapping, on their own ------------------------------------

GOOD = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5}}\r\n\r\n'
        b": keep-alive\n\nevent: x\ndata: [DONE]\n\n")


def test_event_check_relays_good_streams_byte_for_byte_at_any_cut() -> None:
    for cut in range(1, len(GOOD)):
        usage = ApiUsageScanner(APIS["chat"])
        check = EventCheck(on_line=usage.line)
        out = check.feed(GOOD[:cut])
        assert (GOOD[:cut].startswith(out) and out.endswith(b"\n")) or out == b""
        out += check.feed(GOOD[cut:]) + check.flush()
        assert (out, check.bad, usage.usage.prompt) == (GOOD, False, 1234), cut


def test_event_check_stops_at_the_first_bad_line() -> None:
    stream = GOOD.replace(b": keep-alive", b"data: {oops") + b'data: {"later": 1}\n\n'
    for cut in range(1, len(stream)):
        check = EventCheck()
        out = check.feed(stream[:cut]) + check.feed(stream[cut:]) + check.flush()
        assert check.bad and out == stream[:stream.index(b"data: {oops")], cut
        assert check.feed(b'data: {"more": 1}\n') == b""


def test_event_check_holds_one_partial_line_and_lets_overlong_lines_through() -> None:
    check = EventCheck()
    assert check.feed(b'data: {"a": 1}\ndata: {"b"') == b'data: {"a": 1}\n'
    assert check.open_event
    assert check.feed(b": 2}\n\n") == b'data: {"b": 2}\n\n'
    assert not check.open_event
    long = b"data: " + b"x" * (EventCheck.MAX_LINE + 1)
    assert check.feed(long) == long  # unchecked: it went out as it came
    assert check.feed(b"yy\ndata: nope\n") == b"yy\n" and check.bad


def test_event_check_judges_the_last_line_without_a_break() -> None:
    check = EventCheck()
    assert check.feed(b'data: {"a": 1}\n\ndata: [DONE]') == b'data: {"a": 1}\n\n'
    assert check.flush() == b"data: [DONE]" and not check.bad
    check = EventCheck()
    assert check.feed(b"data: <html>") == b"" and check.flush() == b"" and check.bad


@pytest.mark.parametrize("line", [
    b"event: x\rdata: <html>\n", b": note\rdata: {\n", b'data: {"a": 1}\rdata: nope\n',
])
def test_event_check_judges_each_part_a_lone_cr_ends(line: bytes) -> None:
    check = EventCheck()
    assert check.feed(b'data: {"a": 1}\n\n' + line) == b'data: {"a": 1}\n\n' and check.bad


def test_event_check_lets_good_parts_split_by_a_lone_cr_through() -> None:
    check = EventCheck()
    assert check.feed(b"event: x\r: note\n") == b"event: x\r: note\n" and not check.bad


@pytest.mark.parametrize("line, bad", [
    (b'data: {"a": 1}', False), (b"data:[DONE]", False), (b"data: [DONE]", False),
    (b"event: anything", False), (b": comment", False), (b"", False), (b"<html>", False),
    (b"data: <html>", True), (b"data:", True), (b"data: {", True), (b"data: \xff", True),
])
def test_bad_data_lines(line: bytes, bad: bool) -> None:
    assert is_bad_data_line(line) is bad


def test_status_mapping() -> None:
    assert [error_status(s) for s in (400, 401, 404, 413, 429, 500, 501, 502, 503, 504, 520)] \
        == [400, 401, 404, 413, 429, 502, 502, 502, 503, 504, 502]


def test_error_and_completion_judges() -> None:
    empty = unusable_error(500, b"", "", encoded=False)
    assert empty is not None and empty.message == "The upstream answered 500 with an empty body."
    assert unusable_error(400, b'{"error": {}}', "text/plain", encoded=False) is None
    # a gzip body cannot be read here: its Content-Type decides
    assert unusable_error(500, b"\x1f\x8b...", "application/json", encoded=True) is None
    page = unusable_error(500, b"\x1f\x8b...", "text/html; charset=utf-8", encoded=True)
    assert page is not None and (page.status, page.type) == (502, "upstream_error")
    odd = unusable_error(418, b"teapot", "x\n<evil>", encoded=False)
    assert odd is not None and odd.message == "The upstream answered 418 with a non-JSON body."
    assert unusable_completion(b'{"choices": []}') is None
    for body in (b"", b"[]", b'{"choices": {}}', b'{"error": {"message": "x"}}', b'{"cho'):
        assert unusable_completion(body) is not None, body
