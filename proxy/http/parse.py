"""Shape checks for a chat completion request, before anything is forwarded.

Only what the proxy must understand is checked (``model``, ``messages`` and each message's
role/content/tool fields); every other field is the upstream's business and passes untouched.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import bad_request

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Decode a JSON object body or raise a 400 ``ApiError``."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"The request body is not valid JSON: {e}.",
                          code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    return body


def _check_content(i: int, role: str, content: Any) -> None:
    where = f"messages[{i}].content"
    if content is None:
        if role in ("user", "system", "developer", "tool"):
            raise bad_request(f"'{where}' must not be null for a {role} message.", param=where)
        return
    if isinstance(content, str):
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
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) \
                or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                or not isinstance(fn.get("arguments", ""), str):
            raise bad_request(f"'{where}[{j}]' must have a string 'id' and a 'function' with "
                              "string 'name' and 'arguments'.", param=f"{where}[{j}]")


def _check_message(i: int, msg: Any) -> None:
    if not isinstance(msg, dict):
        raise bad_request(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
    role = msg.get("role")
    if role not in ROLES:
        raise bad_request(f"'messages[{i}].role' must be one of {', '.join(sorted(ROLES))}; "
                          f"got {role!r}.", param=f"messages[{i}].role")
    if "content" not in msg and role != "assistant":
        raise bad_request(f"'messages[{i}].content' is required.", param=f"messages[{i}].content")
    _check_content(i, role, msg.get("content"))
    if "name" in msg and not isinstance(msg["name"], str):
        raise bad_request(f"'messages[{i}].name' must be a string.", param=f"messages[{i}].name")
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise bad_request(f"'messages[{i}].tool_call_id' must be a string for a tool message.",
                          param=f"messages[{i}].tool_call_id")
    if role == "assistant" and msg.get("tool_calls") is not None:
        _check_tool_calls(i, msg["tool_calls"])


def check_chat_request(body: dict[str, Any]) -> None:
    """Raise a 400 ``ApiError`` naming the first field that is not a valid chat request."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a non-empty string.", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("'messages' is required and must be a list.", param="messages")
    if not messages:
        raise bad_request("'messages' must contain at least one message.", param="messages")
    for i, msg in enumerate(messages):
        _check_message(i, msg)
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise bad_request("'stream' must be a boolean.", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be a list.", param="tools")


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
