"""What a replayed thinking block or reasoning item is bound to: a digest of its prefix, the
history before it as its request sent it, read canonically (``proxy.testing.fake.prefix_check``).

Anthropic Messages: a block's prefix is ``system``, ``tools`` and every message (and every
earlier block of its own message) before it; ``cache_control`` markers are left aside and a
string ``content`` (or ``system``) reads the same as one text block. OpenAI Responses: an item's
prefix is ``instructions``, ``tools`` and every ``input`` item before it; a string ``input``
reads as one user message, an item without ``type`` as a ``message``, and a message's string
``content`` as one ``input_text`` part (``output_text`` in the assistant's). Nothing else is
ignored: any other change of a byte of the prefix is a change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

Prefix = tuple[str, str, str]  # digests of a thinking block's system, tools and messages before


def digest(value: Any) -> str:
    """A stable digest of a JSON value (keys sorted)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def blocks(message: Any) -> list[dict[str, Any]]:
    """A Messages message's content blocks (a string content: one text block)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return [{"type": "text", "text": content}] if isinstance(content, str) else []


def canonical(value: Any) -> Any:
    """A Messages prefix part as the binding reads it: ``cache_control`` markers aside, a
    string content (or system) the same as one text block."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        return [_canonical_block(b) for b in value]
    return value


def _canonical_block(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if "content" in out:  # a message's blocks, a tool result's
        out["content"] = canonical(out["content"])
    return out


def prefix_of(body: Mapping[str, Any], message: int, block: int) -> Prefix:
    """The prefix of a thinking block at ``messages[message].content[block]`` (``message`` may
    be ``len(messages)``: the answer's own block), canonical."""
    messages = list(body.get("messages") or [])
    before = [*messages[:message], *([blocks(messages[message])[:block]] if block else [])]
    return (digest(canonical(body.get("system"))), digest(canonical(body.get("tools"))),
            digest(canonical(before)))


def items_of(body: Mapping[str, Any]) -> list[Any]:
    """A Responses request's ``input`` as a list of items (a string: one user message)."""
    items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def _canonical_item(item: Any) -> Any:
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        return item
    out = dict(item, type="message")
    if isinstance(out.get("content"), str):
        kind = "output_text" if out.get("role") == "assistant" else "input_text"
        out["content"] = [{"type": kind, "text": out["content"]}]
    return out


def item_prefix(body: Mapping[str, Any], index: int) -> str:
    """The digest of the prefix of the Responses input item at ``index`` (``len(input)``: the
    answer's own first item): instructions, tools and the items before it, canonical."""
    before = [_canonical_item(i) for i in items_of(body)[:index]]
    return digest([body.get("instructions"), body.get("tools"), before])
