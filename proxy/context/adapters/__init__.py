"""Adapters between another API's request and the chat-style message list the stages work on.

Each adapter reads a request body into ``Adapted``: the chat-style ``messages`` (and ``tools``)
the stages plan with, and the way back, ``encode``, which turns the list the stages return into
that API's body. An adapter remembers where each chat-style message came from, so a message the
stages kept comes back as the client's own object, untouched; only a masked result (its output
replaced by the placeholder) and the summary are new. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Encode = Callable[[Sequence[dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True, eq=False)
class Adapted:
    """A request read for the stages. ``encode(messages)`` is the request body for a list the
    stages made of ``messages`` (kept objects, masked copies, a summary); ``prompt(messages)``
    the same for a summary call: the API's message list, and its system prompt (a system
    message the adapter did not read, such as the summary instructions, replaces the
    request's own). ``tools`` is the request's ``tools`` as chat function schemas;
    ``raw_tools`` as the client sent them. ``body`` is the request body itself and ``headers``
    the request's API headers (betas, versions) that a summary call repeats to speak like the
    client; the route sets them. ``reasoning``: the request asks for reasoning or replays some
    (thinking blocks, reasoning items), so a model that binds reasoning to its history
    (``proxy.context.binding``) is managed with that in mind; ``reasoned``: which of
    ``messages`` (assistant turns) carry a thinking block or reasoning item."""

    api: str  # "messages" (Anthropic) or "responses" (OpenAI Responses)
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    encode: Encode
    prompt: Callable[[Sequence[dict[str, Any]]], dict[str, Any]]
    raw_tools: Any = None
    body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    reasoning: bool = False
    reasoned: frozenset[int] = frozenset()  # indices of ``messages`` that carry reasoning


class AdapterError(ValueError):
    """The request cannot be read (a broken tool sequence, a wrong type): ``param`` names
    where."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def content_text(content: Any, marked: Mapping[str, str]) -> str:
    """The text of a content value: a string, or the ``text`` of its blocks or parts joined
    by line breaks; a block whose ``type`` is in ``marked`` (images, files) stands as
    ``[name]``, so it is seen (and roughly counted) without its data."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for b in content:
        if isinstance(b, dict):
            kind = b.get("type")
            if isinstance(b.get("text"), str):
                parts.append(b["text"])
            elif isinstance(kind, str) and kind in marked:  # a list or object is no type
                parts.append(f"[{marked[kind]}]")
    return "\n".join(parts)


def arguments_text(value: Any, where: str) -> str:
    """A call's arguments as the JSON text chat ``tool_calls`` carry: a string as it is, any
    other value encoded; ``AdapterError`` for a value that cannot be encoded (nested past what
    the encoder takes)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (RecursionError, TypeError, ValueError):
        raise AdapterError(f"{where}: the value is nested too deeply", where) from None


def function_tools(tools: Any, schema_key: str, *, typed: bool) -> list[dict[str, Any]] | None:
    """An API's tool list as chat ``tools`` (name, description, parameters), for counting and
    planning; tools that are not functions (web search, computer use) are left out."""
    if not isinstance(tools, list):
        return None
    out = []
    for t in tools:
        if not isinstance(t, dict) or (typed and t.get("type") not in (None, "function")):
            continue
        out.append({"type": "function", "function": {
            "name": str(t.get("name", "")), "description": str(t.get("description", "")),
            "parameters": t.get(schema_key) or {}}})
    return out or None
