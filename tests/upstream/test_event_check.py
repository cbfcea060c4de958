"""``EventCheck`` judges a block of CR-free lines whole; that must decide exactly what judging
them one line at a time decides: the bytes let through, where a bad line stops the stream,
whether an event is left open, and which lines the usage scanner sees."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.answers import EventCheck, ends_stream
from proxy.upstream.usage import UsageScanner

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
        self.usage = UsageScanner()

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
    assert _run(EventCheck(on_line=block.line, only=UsageScanner.marker), stream, cuts) == \
        _run(LineByLine(on_line=by_line.line, only=UsageScanner.marker), stream, cuts)
    assert block.lines == by_line.lines
    assert all(UsageScanner.marker in line for line in block.lines)
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
