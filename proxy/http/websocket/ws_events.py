"""The Responses API's WebSocket mode, its messages and events (no I/O): a client message, the
upgrade's headers as a request's, the SSE data of an upstream stream as the events the socket
sends, the error events, the warmup answer, and the connection-local history that
``previous_response_id`` names (SPEC section 11).

Wire facts this follows (what Codex CLI sends and expects): each server event is one text
message holding the JSON an SSE ``data:`` field would hold; an error is
``{"type": "error", "status": N, "error": {...}, "headers": {...}}`` (a client reads ``status``
as the HTTP status the request would have had, and ``headers`` as its headers); a follow-up
``response.create`` names the previous response of the same socket in ``previous_response_id``
and sends only the items after that response's input and output items.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from multidict import CIMultiDict

from proxy.errors import ApiError, bad_request

# Events that end a response: after one of these, the socket is free for the next request.
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
_MARKERS = (b'"response.output_item.done"', b'"response.completed"', b'"response.failed"',
            b'"response.incomplete"', b'"error"')
CONTEXT_EVENT = "context_proxy.context"
_SOCKET_ONLY = ("sec-websocket-", "upgrade")  # headers of the upgrade, not of a request
_WS_BETA = "responses_websockets"
# Of an answer's headers, those an error event carries (what a client reads off a refusal).
_KEPT_HEADER_PREFIXES = ("x-", "retry-after", "openai-")


class SseEvents:
    """Splits an SSE byte stream, fed in any pieces, into its events' data (the ``data:``
    lines of each event joined by line breaks); comments and other fields are dropped."""

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._partial + chunk
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        out: list[bytes] = []
        for line in data[:end].split(b"\n")[:-1]:
            self._line(line.rstrip(b"\r"), out)
        return out

    def flush(self) -> list[bytes]:
        """At the end of the stream: the last event, when it had no closing blank line."""
        out: list[bytes] = []
        if self._partial:
            self._line(self._partial.rstrip(b"\r"), out)
            self._partial = b""
        self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if not line:
            if self._data:
                out.append(b"\n".join(self._data))
                self._data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)


def event_type(data: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """An event's ``type`` and, when it is one the socket must read (an output item done, an
    end), its parsed JSON; a delta is not parsed (None, None)."""
    if not any(marker in data for marker in _MARKERS):
        return None, None
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return None, None
    return event["type"], event


def as_items(value: Any) -> list[Any]:
    """A Responses ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


@dataclass
class Chain:
    """The socket's last completed response: its id and the full history a follow-up that
    names it continues (the request's full input, then the output items it answered)."""

    response_id: str | None = None
    history: list[Any] = field(default_factory=list)

    def expand(self, body: dict[str, Any]) -> bool:
        """When ``body`` names this chain's response in ``previous_response_id``: rewrite it in
        place into the full request (history + its input, no ``previous_response_id``) and
        return True. Any other id is left for the upstream to resolve (False)."""
        named = body.get("previous_response_id")
        if named is None or named != self.response_id:
            return False
        body["input"] = [*self.history, *as_items(body.get("input"))]
        del body["previous_response_id"]
        return True

    def completed(self, response_id: str, full_input: list[Any], output: list[Any]) -> None:
        self.response_id, self.history = response_id, [*full_input, *output]


@dataclass
class Answer:
    """What the socket reads off one response's events: the output items done, and how it
    ended (the terminal event's type and its response id)."""

    items: list[Any] = field(default_factory=list)
    ended: str | None = None
    response_id: str | None = None
    output: list[Any] | None = None  # ``response.output`` of the completed event

    def see(self, kind: str | None, event: dict[str, Any] | None) -> None:
        if kind is None or event is None:
            return
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self.items.append(event["item"])
        elif kind in TERMINAL:
            self.ended = kind
            response = event.get("response")
            if isinstance(response, dict):
                rid, output = response.get("id"), response.get("output")
                self.response_id = rid if isinstance(rid, str) else None
                self.output = output if isinstance(output, list) else None

    def output_items(self) -> list[Any]:
        """The items the response added: those of its ``output_item.done`` events (what a
        client keeps), else the completed response's ``output``."""
        return self.items or list(self.output or [])


def error_event(status: int, error: Mapping[str, Any], headers: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
    """The wrapped error event: ``status`` as the HTTP status, ``error`` in OpenAI's shape."""
    event: dict[str, Any] = {"type": "error", "status": status, "error": dict(error)}
    if headers:
        event["headers"] = {str(k): str(v) for k, v in headers.items()}
    return event


def api_error_event(e: ApiError, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    return error_event(e.status, e.body()["error"], headers)  # type: ignore[arg-type]


def answer_error_event(status: int, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
    """An error answer (``status``, its JSON ``body``, its ``headers``) as an error event; a
    body without OpenAI's ``error`` object is described in one."""
    try:
        data = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        message = error if isinstance(error, str) else f"The upstream answered {status}."
        error = {"message": message, "type": "upstream_error" if status >= 500
                 else "invalid_request_error", "param": None, "code": None}
    return error_event(status, error, kept_headers(headers))


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(k): str(v) for k, v in headers.items()
            if k.lower().startswith(_KEPT_HEADER_PREFIXES)}


def stream_error(upstream_event: dict[str, Any]) -> dict[str, Any]:
    """An upstream stream's own ``error`` event (no status: it came after a 200) as the wrapped
    error a socket client acts on: a 502, its code and message kept."""
    if isinstance(upstream_event.get("status"), int):
        return upstream_event
    inner = upstream_event.get("error")
    fields = inner if isinstance(inner, dict) else upstream_event
    return error_event(502, {"message": fields.get("message") or "The upstream stream failed.",
                             "type": fields.get("type") or "upstream_error",
                             "param": fields.get("param"), "code": fields.get("code")})


BROKEN = ApiError(502, "The upstream stream ended unexpectedly.", code="upstream_broken",
                  type_="upstream_error")
UNFINISHED = ApiError(502, "The upstream stream ended before the response was completed.",
                      code="upstream_broken", type_="upstream_error")


def context_event(headers: Mapping[str, str]) -> dict[str, Any]:
    """What the ``X-Context-*`` headers say of one request, as the event sent before its first
    upstream event (a socket has no headers per request; clients ignore unknown events)."""
    names = ("X-Conversation-Id", "X-Context-")
    return {"type": CONTEXT_EVENT,
            "headers": {str(k): str(v) for k, v in headers.items() if k.startswith(names)}}


def warmup_events(body: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The answer to ``generate: false`` (a warmup: nothing generated, nothing sent upstream):
    a new response id, and its ``response.created`` and ``response.completed`` events."""
    rid = "resp_" + secrets.token_hex(16)
    response: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress",
        "model": body.get("model"), "output": [], "usage": None, "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {}}
    done = dict(response, status="completed")
    return rid, [{"type": "response.created", "sequence_number": 0, "response": response},
                 {"type": "response.completed", "sequence_number": 1, "response": done}]


def upstream_headers(incoming: Mapping[str, str]) -> CIMultiDict[str]:
    """The upgrade's headers as a POST's: the socket's own dropped (``Sec-WebSocket-*``, the
    ``responses_websockets`` beta), a JSON body declared."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        low = name.lower()
        if low.startswith(_SOCKET_ONLY):
            continue
        if low == "openai-beta":
            value = ", ".join(v.strip() for v in value.split(",")
                              if v.strip() and not v.strip().startswith(_WS_BETA))
            if not value:
                continue
        out.add(name, value)
    out["Content-Type"] = "application/json"
    return out


def parse_message(text: str, limit: int) -> dict[str, Any]:
    """A client message as a JSON object; ``ApiError`` 413 over ``limit`` bytes, 400 when it is
    not a JSON object with a string ``type``."""
    if len(text) > limit or (len(text) * 4 > limit and len(text.encode()) > limit):
        raise ApiError(413, "The message is larger than this proxy accepts.",
                       code="request_too_large")
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise bad_request("The message is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise bad_request("A message must be a JSON object with a string 'type'.", param="type")
    return body
