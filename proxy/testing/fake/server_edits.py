"""What the model reads of a Messages request after the provider's own server-side edits, which
the API makes itself and which never invalidate a thinking block's binding (the prefix it
checks is the one the client sent: ``proxy.testing.fake.prefix_check``).

- A ``compaction`` block in an assistant message (the API's own compaction): everything before
  that message is ignored; the model reads the compaction's ``content`` text as the start of the
  conversation (the system prompt and tools stay).
- ``context_management.edits`` under the ``context-management-2025-06-27`` beta:
  ``clear_tool_uses_20250919`` with ``trigger`` (``{"type": "input_tokens", "value": N}``,
  default 100000), ``keep`` (``{"type": "tool_uses", "value": K}``, default 3),
  ``exclude_tools`` (names) and ``clear_tool_inputs`` (a bool, or the names whose inputs are
  cleared). When the prompt's input tokens exceed the trigger, the content of the results of
  every tool use but the newest K (the excluded tools' aside) is replaced by ``CLEARED``, and
  the answer reports ``context_management: {"applied_edits": [{"type":
  "clear_tool_uses_20250919", "cleared_tool_uses": n, "cleared_input_tokens": t}]}`` (streamed:
  in the ``message_delta`` event). ``clear_thinking_20251015`` is not emulated (with ``keep:
  "all"`` it clears nothing anyway); other edits are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

CONTEXT_MANAGEMENT = "context-management-2025-06-27"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED = "[tool result cleared to save context]"
TRIGGER, KEEP = 100_000, 3
Body = dict[str, Any]


def model_view(body: Body, beta: frozenset[str], tokens: Callable[[Body], int]
               ) -> tuple[Body, dict[str, Any] | None]:
    """``body`` as the model reads it after the server-side edits, and the answer's
    ``context_management`` report (``None``: no edit was asked for); ``tokens`` counts a
    body's input tokens."""
    seen = after_compaction(body)
    context = body.get("context_management")
    edits = context.get("edits") if isinstance(context, dict) else None
    if CONTEXT_MANAGEMENT not in beta or not isinstance(edits, list):
        return seen, None
    applied = []
    for edit in edits:
        if isinstance(edit, dict) and edit.get("type") == CLEAR_TOOL_USES:
            seen, report = clear_tool_uses(seen, edit, tokens)
            if report is not None:
                applied.append(report)
    return seen, {"applied_edits": applied}


def after_compaction(body: Body) -> Body:
    """``body`` from its last assistant message holding a ``compaction`` block on, that
    block read as a text block (the same body when there is none)."""
    messages = body.get("messages") or []
    for k in range(len(messages) - 1, -1, -1):
        content = messages[k].get("content") if isinstance(messages[k], dict) else None
        if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "compaction" for b in content):
            return dict(body, messages=[dict(messages[k], content=[
                _as_text(b) for b in content if _as_text(b) is not None]), *messages[k + 1:]])
    return body


def _as_text(block: Any) -> Any:
    if not isinstance(block, dict) or block.get("type") != "compaction":
        return block
    text = block.get("content")
    return {"type": "text", "text": text} if isinstance(text, str) and text.strip() else None


def _value(setting: Any, default: int) -> int:
    value = setting.get("value") if isinstance(setting, dict) else None
    return value if isinstance(value, int) else default


def _names(setting: Any) -> set[str]:
    return {str(n) for n in setting} if isinstance(setting, list) else set()


def tool_uses(body: Body) -> list[tuple[str, str]]:
    """(id, name) of every ``tool_use`` block of the assistant messages, in order."""
    return [(str(b.get("id")), str(b.get("name")))
            for m in body.get("messages") or [] if isinstance(m, dict)
            and m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]


def clear_tool_uses(body: Body, edit: Mapping[str, Any], tokens: Callable[[Body], int]
                    ) -> tuple[Body, dict[str, Any] | None]:
    """``body`` with the older tool uses' results cleared as ``edit`` asks, and its applied
    edit (``None``: under its trigger, nothing done)."""
    before = tokens(body)
    if before <= _value(edit.get("trigger"), TRIGGER):
        return body, None
    uses = tool_uses(body)
    kept = max(0, _value(edit.get("keep"), KEEP))
    excluded = _names(edit.get("exclude_tools"))
    older = uses[:len(uses) - kept] if kept else uses
    cleared = {i: name for i, name in older if name not in excluded}
    inputs = edit.get("clear_tool_inputs")
    wiped = set(cleared.values()) if inputs is True else _names(inputs) & set(cleared.values())
    messages = [_cleared(m, cleared, wiped) for m in body.get("messages") or []]
    after = dict(body, messages=messages)
    done = sum(1 for m in messages for b in _list(m)
               if b.get("type") == "tool_result" and b.get("tool_use_id") in cleared)
    return after, {"type": CLEAR_TOOL_USES, "cleared_tool_uses": done,
                   "cleared_input_tokens": max(0, before - tokens(after))}


def _list(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _cleared(message: Any, cleared: Mapping[str, str], wiped: set[str]) -> Any:
    """``message`` with the results of the ``cleared`` tool uses replaced by ``CLEARED`` and
    the inputs of the ``wiped`` tools' uses emptied."""
    if not _list(message):
        return message
    blocks = []
    for b in message["content"]:
        if isinstance(b, dict) and b.get("type") == "tool_result" and b.get(
                "tool_use_id") in cleared:
            b = dict(b, content=CLEARED)
        elif isinstance(b, dict) and b.get("type") == "tool_use" and b.get(
                "id") in cleared and b.get("name") in wiped:
            b = dict(b, input={})
        blocks.append(b)
    return dict(message, content=blocks)
