"""Helpers shared by the stages: message text, protection rules, tool groups, the summary marker.

A *tool group* is a non-tool message followed by the run of ``tool`` (or legacy ``function``)
messages after it. In a list that obeys OpenAI's ordering rules, the results of an assistant's
calls are exactly the run that follows it, so a cut placed before a non-tool message never
separates a call from its results, parallel calls included.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from proxy.context.tokens.formula import fingerprint
from proxy.policy.model import ProtectedRule

Message = Mapping[str, Any]
RESULT_ROLES = ("tool", "function")

SUMMARY_OPEN = "<context_summary>"
SUMMARY_CLOSE = "</context_summary>"
SUMMARY_INTRO = (
    "Summary of the earlier part of this conversation, written when it was compacted to free "
    "up context. Continue the work from it and the messages that follow."
)


def message_text(message: Message) -> str:
    """The message's textual content: the string, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def as_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A new list of the same messages, as dicts (dicts are not copied)."""
    if type(messages) is list and set(map(type, messages)) <= _DICT:  # the usual case, in C
        return messages.copy()
    return [m if isinstance(m, dict) else dict(m) for m in messages]


_DICT = frozenset({dict})


def first_items(pairs: Sequence[tuple[int, int]]) -> list[int]:
    """The first item of every pair (a message's tokens of its (tokens, content tokens)), in
    one pass in C."""
    return list(map(_first, pairs))


_first = itemgetter(0)


def is_result(message: Message) -> bool:
    return message.get("role") in RESULT_ROLES


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary written by an earlier compaction (by its marker)."""
    content = message.get("content")
    # Only the head is stripped: lstrip() on a whole large string would copy it.
    return isinstance(content, str) and content[:256].lstrip().startswith(SUMMARY_OPEN)


def format_summary(text: str) -> str:
    """The content of a summary message: the marker, a short notice, the summary text."""
    return f"{SUMMARY_OPEN}\n{SUMMARY_INTRO}\n\n{text.strip()}\n{SUMMARY_CLOSE}"


def summary_body(message: Message) -> str:
    """The summary text inside a summary message (marker and notice removed)."""
    text = message_text(message).strip()
    text = text.removeprefix(SUMMARY_OPEN).removesuffix(SUMMARY_CLOSE).strip()
    return text.removeprefix(SUMMARY_INTRO).strip()


def is_protected(
    message: Message, rules: Sequence[ProtectedRule], tool_name: str | None = None
) -> bool:
    """Whether a ``compaction.protected`` rule matches: its marker is in the message's text, or
    its name equals the message's ``name`` (or, for a tool result, the name of the tool)."""
    text: str | None = None
    for rule in rules:
        if rule.name and rule.name in (message.get("name"), tool_name):
            return True
        if rule.marker:
            if text is None:
                text = message_text(message)
            if rule.marker in text:
                return True
    return False


def tool_names_by_call_id(messages: Sequence[Message]) -> dict[str, str]:
    """Call id → function name, from every assistant message's ``tool_calls``."""
    names: dict[str, str] = {}
    for m in messages:
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if isinstance(calls, list):
            for call in calls:
                if not isinstance(call, Mapping):
                    continue
                fn = call.get("function")
                if isinstance(call.get("id"), str) and isinstance(fn, Mapping):
                    names[call["id"]] = str(fn.get("name") or "")
    return names


def result_tool_name(message: Message, names: Mapping[str, str]) -> str:
    """The tool a result message answers: resolved by call id, else its ``name``."""
    cid = message.get("tool_call_id")
    found = names.get(cid) if isinstance(cid, str) else None
    return found or str(message.get("name") or "tool")


def called_tools(message: Message) -> list[str]:
    """Function names an assistant message calls (``tool_calls`` or legacy ``function_call``)."""
    out: list[str] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and fn.get("name"):
                out.append(str(fn["name"]))
    fc = message.get("function_call")
    if isinstance(fc, Mapping) and fc.get("name"):
        out.append(str(fc["name"]))
    return out


def group_bounds(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The tool groups as half-open ``(start, end)`` index ranges, in order, covering the list."""
    bounds: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(messages) + 1):
        if i == len(messages) or not is_result(messages[i]):
            bounds.append((start, i))
            start = i
    return bounds if messages else []


def prefix_hash(messages: Sequence[Message], n: int) -> str:
    """A stable digest of exactly the first ``n`` messages (every field of each), the same in
    every process: what a stored compaction is keyed by."""
    h = hashlib.blake2b(digest_size=16)
    h.update(n.to_bytes(8, "little"))
    for m in messages[:n]:
        h.update(fingerprint(m))
    return h.hexdigest()
