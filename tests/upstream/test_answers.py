"""Judging upstream answers (``proxy.upstream.answers``): the status an unusable error body is
answered with, what counts as a chat completion and as a bad SSE data line, and ``EventCheck``,
which judges a block of CR-free lines whole and must decide exactly what judging them one line
at a time decides: the bytes let through, where a bad line stops the stream, whether an event
is left open, and which lines the usage scanner sees."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.apis import APIS
from proxy.apis.calls import ApiUsageScanner
from proxy.upstream.answers import (
    EventCheck,
    ends_stream,
    error_status,
    is_bad_data_line,
    is_json,
    unusable_completion,
    unusable_error,
)

LINES = [b'data: {"choices":[{"delta":{"content":"hi"}}]}', b"", b": keep-alive",
         b"event: message", b"data: [DONE]", b"data: <html>", b'data: {"a": 1',
         b'data: {"choices":[],"usage":{"prompt_tokens":77,"prompt_tokens_details":'
         b'{"cached_tokens":64}}}', b'data:{"x":2}\r', b"id: 7", b"data:", b"data: 12"]


class LineByLine(EventCheck):
    """The same check, always one line at a time."""

    def _check(self, data: bytes, end: int) -> int:
        return self._check_lines(data, end)


class Seen:
    """What a check passes on: the lines, and the usage they give."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.usage = ApiUsageScanner(APIS["chat"])

    def line(self, line: bytes) -> None:
        self.lines.append(line)
        self.usage.line(line)


def _run(check: EventCheck, stream: bytes, cuts: list[int]) -> tuple[bytes, bool, bool]:
    out, start = b"", 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out += check.feed(stream[start:cut])
        start = cut
    return out + check.flush(), check.bad, check.open_event


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=12), st.lists(st.integers(0, 600), max_size=4))
def test_a_block_is_judged_as_its_lines_are(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    cuts = [c for c in cuts if c < len(stream)]
    block, by_line = Seen(), Seen()
    assert _run(EventCheck(on_line=block.line, only=APIS["chat"].usage_marker), stream, cuts) == \
        _run(LineByLine(on_line=by_line.line, only=APIS["chat"].usage_marker), stream, cuts)
    assert block.lines == by_line.lines
    assert all(APIS["chat"].usage_marker in line for line in block.lines)
    assert block.usage.usage == by_line.usage.usage


def test_only_filters_the_lines_the_scanner_sees() -> None:
    seen: list[bytes] = []
    check = EventCheck(on_line=seen.append, only=b'"prompt_tokens"')
    stream = b'data: {"a": 1}\n\ndata: {"usage": {"prompt_tokens": 5}}\n\ndata: [DONE]\n\n'
    assert check.feed(stream) == stream and not check.bad
    assert seen == [b'data: {"usage": {"prompt_tokens": 5}}']
    everything: list[bytes] = []
    check = EventCheck(on_line=everything.append)
    check.feed(stream)
    assert len(everything) == 3


RESPONSES_END = (b"response.completed", b"response.failed", b"response.incomplete", b"error")


def test_an_event_named_in_a_text_delta_does_not_end_the_stream() -> None:
    quoted = (b'event: response.output_text.delta\n'
              b'data: {"type":"response.output_text.delta","delta":"a \\"type\\": \\"error\\" '
              b'and response.completed"}\n\n')
    check = EventCheck(terminal=RESPONSES_END)
    assert check.feed(quoted) == quoted
    assert not check.finished


def test_each_form_of_a_final_event_ends_the_stream() -> None:
    for line in (b"event: error", b'data: {"type": "response.completed", "response": {}}',
                 b'data:{"type":"error","error":{}}', b"data: [DONE]"):
        check = EventCheck(terminal=(*RESPONSES_END, b"[DONE]"))
        check.feed(line + b"\n")
        assert check.finished, line
    assert ends_stream(b"event: message_stop", (b"message_stop",))
    assert not ends_stream(b"id: message_stop", (b"message_stop",))
    assert not ends_stream(b'data: ["message_stop"]', (b"message_stop",))


@pytest.mark.parametrize(("status", "answered"), [
    (400, 400), (401, 401), (404, 404), (429, 429), (500, 502), (501, 502), (502, 502),
    (503, 503), (504, 504), (599, 502)])
def test_an_unusable_error_keeps_4xx_503_and_504_and_turns_other_5xx_into_502(
        status: int, answered: int) -> None:
    assert error_status(status) == answered


def test_a_json_error_body_is_relayed_and_any_other_is_replaced() -> None:
    assert unusable_error(500, b'{"error": {"message": "x"}}', "text/plain", False) is None
    html = unusable_error(500, b"<html>boom</html>", "text/html; charset=utf-8", False)
    assert html is not None and (html.status, html.code, html.type) == (
        502, "upstream_non_json_error", "upstream_error")
    assert html.message == "The upstream answered 500 with a non-JSON body (text/html)."
    empty = unusable_error(429, b"", "", False)
    assert empty is not None and (empty.status, empty.type) == (429, "rate_limit_error")
    assert empty.message == "The upstream answered 429 with an empty body."
    odd = unusable_error(400, b"x", "not a media type at all", False)
    assert odd is not None and odd.message.endswith("a non-JSON body.")


def test_an_encoded_error_body_is_judged_by_its_content_type() -> None:
    assert unusable_error(500, b"\x1f\x8b...", "application/problem+json", True) is None
    assert unusable_error(500, b"\x1f\x8b...", "text/html", True) is not None


def test_a_200_answer_must_be_a_chat_completion() -> None:
    assert unusable_completion(b'{"choices": []}') is None
    for body, what in [(b'{"choices": [', "a body that is not JSON"),
                       (b'{"id": "x"}', "JSON that is not a chat completion"),
                       (b"[1, 2]", "JSON that is not a chat completion")]:
        error = unusable_completion(body)
        assert error is not None and (error.status, error.code) == (
            502, "upstream_invalid_answer")
        assert error.message == f"The upstream answered 200 with {what}."


def test_json_and_bad_data_lines() -> None:
    assert is_json(b'{"a": 1}') and is_json(b"12") and not is_json(b"") and not is_json(b"{")
    assert not is_bad_data_line(b"data: [DONE]") and not is_bad_data_line(b'data: {"a":1}')
    assert not is_bad_data_line(b"event: <html>") and not is_bad_data_line(b": comment")
    assert is_bad_data_line(b"data: <html>") and is_bad_data_line(b"data:")


def test_ends_stream_knows_the_event_not_a_mention_of_it() -> None:
    names = (b"[DONE]", b"message_stop")
    assert ends_stream(b"data: [DONE]", names)
    assert ends_stream(b"event: message_stop", names)
    assert ends_stream(b'data: {"type": "message_stop"}', names)
    assert not ends_stream(b'data: {"type": "delta", "text": "message_stop"}', names)
    assert not ends_stream(b"id: message_stop", names)
    assert not ends_stream(b'data: {"type": "delta"}', names)
