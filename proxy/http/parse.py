"""The request parser shared by the handlers: read the body, parse it, check it.

For a chat completion, one walk over ``messages`` checks each message's shape and feeds the
ordering check (``proxy.context.stages.ordering``), so a request is read and judged once. Only
what the proxy must understand is checked (what every managed API's body must have,
``proxy.apis.api.check_common``, then ``messages`` and each message's role/content/tool
fields); every other field is the upstream's business and passes untouched. Every refusal is a
400 ``ApiError`` naming the field (413 for a body over the limit).

JSON is parsed with orjson: several times faster than the standard library on large bodies,
and strict (invalid UTF-8, lone surrogates, NaN, numbers too large for a float and nesting
deeper than 1,024 levels are refused as bad JSON instead of reaching the proxy's code; an
integer beyond 64 bits is read as a float, while the upstream still gets the client's bytes).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from aiohttp import web

from proxy.apis.api import check_common
from proxy.context.checked import CheckedLists, restart_point
from proxy.context.job import ChatRequest
from proxy.context.stages.ordering import OrderingCheck
from proxy.errors import ApiError, bad_request
from proxy.http.encoding import decoded

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_NULL_CONTENT_ROLES = frozenset({"user", "system", "developer", "tool"})


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request's body, decoded under its ``Content-Encoding`` (``proxy.http.encoding``)."""
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError(413, f"The request body is {length} bytes; this proxy accepts at most "
                       f"{limit}.", code="request_too_large")
    try:
        raw = await request.read()  # aiohttp enforces client_max_size when the length is unknown
    except web.HTTPRequestEntityTooLarge:
        raise
    except aiohttp.web_protocol.RequestPayloadError as e:  # a broken chunked body, say
        raise bad_request(f"The request body could not be read: {e.__cause__ or e}.",
                          code="invalid_body") from None
    return decoded(raw, request.headers.get("Content-Encoding", ""), limit)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Decode a JSON object body or raise a 400 ``ApiError``."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"The request body is not valid JSON: {e}.",
                          code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    return body


async def read_chat(request: web.Request, limit: int, checked: CheckedLists | None = None
                    ) -> ChatRequest:
    """Read, parse and check a chat completion request (see the module docstring)."""
    raw = await read_body(request, limit)
    return check_chat(raw, parse_json_object(raw), checked)


def check_chat(raw: bytes, body: dict[str, Any], checked: CheckedLists | None = None
               ) -> ChatRequest:
    """Check ``body`` (parsed from ``raw``): what every managed API's body must have first
    (``check_common``: the same refusals as on every route), then the messages' shape, then
    their ordering. With ``checked``, leading messages shared with a list already checked are
    not checked again."""
    check_common(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("'messages' is required and must be a list.", param="messages")
    if not messages:
        raise bad_request("'messages' must contain at least one message.", param="messages")
    key = checked.key(messages) if checked is not None else None
    repeats, shared = checked.shared(messages, raw, key) if key is not None and \
        checked is not None else (None, 0)
    start = restart_point(messages, shared)
    ordering = OrderingCheck()
    step = ordering.step
    for i in range(start, len(messages)):
        msg = messages[i]
        step(i, _check_message(i, msg), msg)
    problems = ordering.finish()
    if problems:
        raise bad_request(f"Invalid message sequence: {problems[0]}", param="messages",
                          code="invalid_message_sequence")
    if key is not None and checked is not None:
        checked.remember(messages, raw, key)
    return ChatRequest(raw, body, messages, body["model"], body.get("tools"),
                       body.get("stream") is True, repeats, shared)


def _check_message(i: int, msg: Any) -> str:
    """Check one message's shape; its role."""
    if type(msg) is not dict:
        raise bad_request(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
    role = msg.get("role")
    if type(role) is not str or role not in ROLES:  # (a list or an object is not hashable)
        got = repr(role[:40]) if type(role) is str else type(role).__name__
        raise bad_request(f"'messages[{i}].role' must be one of {', '.join(sorted(ROLES))}; "
                          f"got {got}.", param=f"messages[{i}].role")
    if type(msg.get("content")) is not str:  # the common case costs one check
        if "content" not in msg and role != "assistant":
            raise bad_request(f"'messages[{i}].content' is required.",
                              param=f"messages[{i}].content")
        _check_content(i, role, msg.get("content"))
    if "name" in msg and type(msg["name"]) is not str:
        raise bad_request(f"'messages[{i}].name' must be a string.", param=f"messages[{i}].name")
    if role == "tool":
        if type(msg.get("tool_call_id")) is not str:
            raise bad_request(f"'messages[{i}].tool_call_id' must be a string for a tool "
                              "message.", param=f"messages[{i}].tool_call_id")
    elif role == "assistant" and msg.get("tool_calls") is not None:
        _check_tool_calls(i, msg["tool_calls"])
    return role


def _check_content(i: int, role: str, content: Any) -> None:
    where = f"messages[{i}].content"
    if content is None:
        if role in _NULL_CONTENT_ROLES:
            raise bad_request(f"'{where}' must not be null for a {role} message.", param=where)
        return
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts, got "
                          f"{type(content).__name__}.", param=where)
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise bad_request(f"'{where}[{j}]' must be an object with a string 'type'.",
                              param=f"{where}[{j}]")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise bad_request(f"'{where}[{j}].text' must be a string.", param=f"{where}[{j}]")


def _check_tool_calls(i: int, calls: Any) -> None:
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request(f"'{where}' must be a list.", param=where)
    for j, call in enumerate(calls):
        fn = call.get("function") if type(call) is dict else None
        if type(fn) is not dict or type(call.get("id")) is not str \
                or type(fn.get("name")) is not str or type(fn.get("arguments", "")) is not str:
            raise bad_request(f"'{where}[{j}]' must have a string 'id' and a 'function' with "
                              "string 'name' and 'arguments'.", param=f"{where}[{j}]")
