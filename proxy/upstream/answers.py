"""Judging upstream answers before they reach a client: error bodies, chat completions, SSE lines.

Pure, no I/O. Each judge returns the ``ApiError`` to answer instead, or None when the answer may
be relayed as it is; only the body's status and media type ever reach a message, never the body.

Status of an error answer whose body is not JSON (``error_status``): a 4xx keeps its status (the
request was refused: 429 stays a rate limit, its ``Retry-After`` kept, and 401/404 keep meaning
what they mean to SDKs and their retry logic); 503 and 504 keep theirs (unavailable, timed out:
both are what a client or load balancer retries on, and 504 is what the proxy itself answers
when the upstream is slow); any other 5xx becomes 502: the upstream failed and said so in
something that is not an API answer, a bad gateway from the client's side (a 500 from the proxy
would read as the proxy's own fault).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import orjson

from proxy.errors import ApiError

_KEPT_5XX = frozenset({503, 504})
_MEDIA_TYPE = re.compile(r"[\w.+-]{1,60}/[\w.+-]{1,60}")


def error_status(status: int) -> int:
    """The status answered for an upstream error answer (>= 400) whose body is unusable."""
    return status if status < 500 or status in _KEPT_5XX else 502


def is_json(body: bytes) -> bool:
    """Whether ``body`` is one JSON document (UTF-8; empty is not)."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _says_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def unusable_error(status: int, body: bytes, content_type: str, encoded: bool
                   ) -> ApiError | None:
    """None when an error answer (``status`` >= 400) can be relayed: its body is JSON or, when it
    is content-encoded (so unreadable here), its ``Content-Type`` says JSON. Otherwise the
    OpenAI-shaped error to answer instead, at ``error_status(status)``."""
    if _says_json(content_type) if encoded else is_json(body):
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    what = "an empty body" if not body else "a non-JSON body" + (
        f" ({media})" if _MEDIA_TYPE.fullmatch(media) else "")
    mapped = error_status(status)
    return ApiError(mapped, f"The upstream answered {status} with {what}.",
                    code="upstream_non_json_error",
                    type_="upstream_error" if mapped >= 500 else None)


def unusable_completion(body: bytes) -> ApiError | None:
    """None when a 200 chat answer is a JSON object with a ``choices`` list; otherwise a 502
    ``upstream_invalid_answer`` (cut off, invalid JSON, or not a chat completion)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _invalid("a body that is not JSON")
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return _invalid("JSON that is not a chat completion")
    return None


def _invalid(what: str) -> ApiError:
    return ApiError(502, f"The upstream answered 200 with {what}.",
                    code="upstream_invalid_answer")


def is_bad_data_line(line: bytes) -> bool:
    """Whether an SSE line (without its line break) is a ``data:`` field whose value is neither
    JSON nor ``[DONE]``. A line is judged on its own: OpenAI-compatible upstreams send one JSON
    document per ``data:`` line."""
    if not line.startswith(b"data:"):
        return False
    value = line[5:].strip()
    return not value.startswith(b"[DONE]") and not is_json(value)


def ends_stream(line: bytes, names: tuple[bytes, ...]) -> bool:
    """Whether an SSE ``line`` is one of the events ``names`` (``[DONE]``, ``message_stop``...):
    an ``event:`` line of that name, a ``data:`` line that is the name itself, or a data line
    whose JSON object has it as its ``type``. A name quoted inside other data (a text delta
    that mentions ``message_stop``) is not the event."""
    if not any(n in line for n in names):
        return False
    field, _, value = line.partition(b":")
    value = value.strip()
    if field == b"event":
        return value in names
    if field != b"data":
        return False
    if value in names:
        return True
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    kind = event.get("type") if isinstance(event, dict) else None
    return isinstance(kind, str) and kind.encode() in names


class EventCheck:
    """Checks an SSE stream line by line while it is relayed, holding at most one partial line.

    ``feed`` returns what may be written now: the complete lines up to the first bad data line
    (``is_bad_data_line``); the partial line at the end is held until its line break comes, so a
    client never gets part of an event. A line longer than ``MAX_LINE`` is let through
    unchecked. After a bad line ``bad`` is set and nothing more is returned. ``on_line`` sees
    each good complete line, without its line break (the usage scanner); with ``only``, just
    the lines that contain it. ``terminal``: the markers of the events that end the API's
    stream (``[DONE]``, ``message_stop``...); ``finished`` says whether one went out (always
    true without markers).
    """

    MAX_LINE = 1 << 20

    def __init__(self, on_line: Callable[[bytes], None] | None = None,
                 only: bytes = b"", terminal: tuple[bytes, ...] = ()) -> None:
        self.bad = False
        self.finished = not terminal
        self._terminal = terminal
        self.open_event = False  # a data line went out and the event's blank line did not yet
        self._on_line = on_line
        self._only = only
        self._partial = b""
        self._unchecked = False  # the held line's start went out unchecked (over MAX_LINE)

    def feed(self, chunk: bytes) -> bytes:
        if self.bad:
            return b""
        data = self._partial + chunk if self._partial else chunk
        end = data.rfind(b"\n") + 1
        good = self._check(data, end)
        if self.bad:
            return self._seen(data[:good])
        self._partial = data[end:]
        if len(self._partial) <= self.MAX_LINE:
            return self._seen(data[:end])
        self._partial, self._unchecked = b"", True
        return self._seen(data)

    def _seen(self, out: bytes) -> bytes:
        """``out`` (complete lines: a marker is never split), noting a terminal event in it."""
        if not self.finished and out and any(t in out for t in self._terminal):
            self.finished = any(ends_stream(line, self._terminal) for line in out.splitlines())
        return out

    def flush(self) -> bytes:
        """At the end of the stream: the held last line (one with no line break), when good."""
        rest, self._partial = self._partial, b""
        if self.bad:
            return b""
        if rest and not self._unchecked and not self._good(rest):
            self.bad = True
            return b""
        return self._seen(rest)

    def _check(self, data: bytes, end: int) -> int:
        """Check the lines of ``data[:end]``; the offset where the good ones end. A block with no
        CR (the usual one: an event is two such lines, and they come by the thousand) is judged
        whole; any other block, or one with a bad line, line by line (``_check_lines``)."""
        block = data[:end]
        if self._unchecked or b"\r" in block:
            return self._check_lines(data, end)
        lines = block.split(b"\n")
        lines.pop()  # after the last line break
        if any(is_bad_data_line(line) for line in lines if line[:5] == b"data:"):
            return self._check_lines(data, end)  # nothing changed yet: find where it breaks
        for line in reversed(lines):  # what the last blank or data line leaves open
            if not line or line[:5] == b"data:":
                self.open_event = bool(line)
                break
        if self._on_line is not None:
            only = self._only
            for line in lines:
                if line and only in line:
                    self._on_line(line)
        return end

    def _check_lines(self, data: bytes, end: int) -> int:
        """``_check`` one line at a time."""
        start = 0
        while start < end:
            stop = data.index(b"\n", start) + 1
            if self._unchecked:
                self._unchecked = False  # the rest of a line let through unchecked
            elif not self._good(data[start:stop - 1]):
                self.bad = True
                return start
            start = stop
        return end

    def _good(self, line: bytes) -> bool:
        if line[-1:] == b"\r":
            line = line[:-1]
        if not line:
            self.open_event = False
            return True
        # A lone CR also ends a line in SSE: each part must be good on its own.
        if b"\r" in line and any(is_bad_data_line(p) for p in line.split(b"\r")):
            return False
        if line[:5] == b"data:":
            if is_bad_data_line(line):
                return False
            self.open_event = True
        if self._on_line is not None and self._only in line:
            self._on_line(line)
        return True
