"""The Anthropic Messages API (``POST /v1/messages``) read as chat-style messages, and back.

- ``system`` (text or blocks) is one system message for the stages and always goes back as the
  client sent it.
- An assistant message is one chat message: its text, and its ``tool_use`` blocks as
  ``tool_calls``. ``thinking`` and ``redacted_thinking`` blocks travel inside it untouched.
- A user message's ``tool_result`` blocks are one ``tool`` message each (what masking may
  replace); its other blocks (text, images, documents, types not known here) one user message.
- A message of any other role (a ``system`` message among the messages, as a beta of the API
  allows, or a role the API adds later), or whose content is neither text nor blocks, is opaque:
  one ``system`` (or ``developer``) message for the stages, which keep it verbatim in place and
  never mask or summarize it; whether the upstream accepts it is the upstream's call.
- Going back, a message whose parts all stayed is the client's object itself; a masked result
  keeps its block (``cache_control``, ``is_error``) with only ``content`` replaced; a call whose
  arguments masking cleared keeps its ``tool_use`` block with only ``input`` replaced (the
  cleared arguments' JSON object); the summary is a user message (the API has no system role
  among messages).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from proxy.context.adapters import (
    Adapted,
    AdapterError,
    arguments_text,
    content_text,
    function_tools,
)
from proxy.context.adapters.cleared import is_cleared

Part = int | str  # a tool_result's block index, "all" (the whole message), "rest" or "calls"
Origin = tuple[int, Part]
SYSTEM = -1


MARKED = {"image": "image", "document": "document"}
THINKING = ("thinking", "redacted_thinking")  # the blocks a turn replays its reasoning in


def _text(content: Any) -> str:
    return content_text(content, MARKED)


class _Reader:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.messages: list[dict[str, Any]] = []
        self.origins: dict[int, Origin] = {}
        self.results: dict[str, Origin] = {}
        self.calls: dict[str, Origin] = {}  # tool_use id -> (message index, block index)
        self.pending: dict[str, str] = {}  # tool_use ids awaiting their result -> where made
        self.reasoned: set[int] = set()  # indices of messages that carry thinking

    def add(self, message: dict[str, Any], origin: Origin) -> None:
        self.messages.append(message)
        self.origins[id(message)] = origin

    def read(self) -> None:
        system = _text(self.body.get("system"))
        if system:
            self.add({"role": "system", "content": system}, (SYSTEM, "all"))
        msgs = self.body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise AdapterError("messages: expected a non-empty list of messages", "messages")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise AdapterError(f"messages.{i}: Input should be a valid dictionary",
                                   f"messages.{i}")
            content = m.get("content")
            if m.get("role") not in ("user", "assistant") or not isinstance(content, str | list):
                self._opaque(i, m)
            elif m["role"] == "assistant":
                self._assistant(i, content)
            else:
                self._user(i, content)

    def _opaque(self, i: int, m: dict[str, Any]) -> None:
        role = "system" if m.get("role") == "system" else "developer"
        self.add({"role": role, "content": _text(m.get("content"))}, (i, "all"))

    def _assistant(self, i: int, content: str | list[Any]) -> None:
        self._no_pending(i)
        blocks = content if isinstance(content, list) else []
        calls = []
        for j, b in enumerate(blocks):
            if isinstance(b, dict) and b.get("type") == "tool_use":
                if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                    raise AdapterError(f"messages.{i}.content.{j}: a tool_use block needs a "
                                       "string id and name", f"messages.{i}.content.{j}")
                if not isinstance(b.get("input", {}), dict):
                    raise AdapterError(f"messages.{i}.content.{j}.input: Input should be a "
                                       "valid dictionary", f"messages.{i}.content.{j}.input")
                where = f"messages.{i}.content.{j}.input"
                calls.append({"id": b["id"], "type": "function", "function": {
                    "name": b["name"], "arguments": arguments_text(b.get("input", {}), where)}})
                self.pending[b["id"]] = f"messages.{i}"
                self.calls[b["id"]] = (i, j)
        message: dict[str, Any] = {"role": "assistant", "content": _text(content) or None}
        if calls:
            message["tool_calls"] = calls
        if any(isinstance(b, dict) and b.get("type") in THINKING for b in blocks):
            self.reasoned.add(len(self.messages))
        self.add(message, (i, "all"))

    def _user(self, i: int, content: str | list[Any]) -> None:
        if isinstance(content, str):
            self._no_pending(i)
            self.add({"role": "user", "content": content}, (i, "all"))
            return
        rest = []
        for j, b in enumerate(content):
            if not isinstance(b, dict) or b.get("type") != "tool_result":
                rest.append(b)
                continue
            tid = b.get("tool_use_id")
            if not isinstance(tid, str) or tid not in self.pending:
                raise AdapterError(f"messages.{i}.content.{j}: unexpected `tool_use_id` found "
                                   f"in `tool_result` blocks: {tid}. Each `tool_result` block "
                                   "must have a corresponding `tool_use` block in the previous "
                                   "message.", f"messages.{i}.content.{j}")
            del self.pending[tid]
            self.add({"role": "tool", "tool_call_id": tid, "content": _text(b.get("content"))},
                     (i, j))
            self.results[tid] = (i, j)
        self._no_pending(i)
        if rest:
            self.add({"role": "user", "content": _text(rest)}, (i, "rest"))

    def _no_pending(self, i: int) -> None:
        if self.pending:
            raise AdapterError(f"messages.{i}: `tool_use` ids were found without "
                               "`tool_result` blocks immediately after: "
                               f"{', '.join(sorted(self.pending))}. Each `tool_use` block must "
                               "have a corresponding `tool_result` block in the next message.",
                               f"messages.{i}")


def read(body: dict[str, Any]) -> Adapted:
    """The request for the stages; ``AdapterError`` when it breaks the API's rules."""
    r = _Reader(body)
    r.read()
    originals: list[Any] = body["messages"]

    def pieces(out: Sequence[dict[str, Any]]) -> list[Any]:
        """Each stage message as (message index, part, new result text or None) or a new
        message; the system message is left out (``system`` goes back as it came)."""
        got: list[Any] = []
        for m in out:
            origin = r.origins.get(id(m))
            if origin is not None:
                if origin[0] != SYSTEM:
                    got.append((origin[0], origin[1], None))
            elif m.get("role") == "tool" and m.get("tool_call_id") in r.results:
                i, j = r.results[m["tool_call_id"]]
                got.append((i, j, m.get("content")))
            elif (cleared := _cleared_inputs(m, r.calls)) is not None:
                got.append(cleared)
            else:
                role = "assistant" if m.get("role") == "assistant" else "user"
                got.append({"role": role, "content": str(m.get("content") or "")})
        return got

    def messages_of(out: Sequence[dict[str, Any]]) -> list[Any]:
        return _assemble(originals, pieces(out))

    def encode(out: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {**body, "messages": messages_of(out)}

    def prompt(out: Sequence[dict[str, Any]]) -> dict[str, Any]:
        new = [m for m in out if m.get("role") == "system" and id(m) not in r.origins]
        rest = [m for m in out if not any(m is n for n in new)]
        doc: dict[str, Any] = {"messages": messages_of(rest)}
        if new:
            doc["system"] = "\n\n".join(str(m.get("content") or "") for m in new)
        elif "system" in body:
            doc["system"] = body["system"]
        return doc

    return Adapted("messages", r.messages, function_tools(body.get("tools"), "input_schema",
                                                           typed=False), encode, prompt,
                   raw_tools=body.get("tools"), body=body,
                   reasoning=_asks_thinking(body) or bool(r.reasoned),
                   reasoned=frozenset(r.reasoned))



def _asks_thinking(body: dict[str, Any]) -> bool:
    """Whether the request asks for thinking (the turns replaying it: ``_Reader.reasoned``)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


def _assemble(originals: list[Any], pieces: list[Any]) -> list[Any]:
    """Runs of pieces from one original message become that message again: itself when every
    part is there unchanged, else a copy with only the parts kept (results replaced)."""
    out: list[Any] = []
    run: dict[Part, Any] = {}
    at = -1
    for piece in [*pieces, None]:
        if isinstance(piece, tuple) and piece[0] == at:
            run[piece[1]] = piece[2]
            continue
        if run:
            out.append(_rebuild(originals[at], run))
            run, at = {}, -1
        if isinstance(piece, tuple):
            at, run = piece[0], {piece[1]: piece[2]}
        elif piece is not None:
            out.append(piece)
    return out


def _cleared_inputs(m: dict[str, Any], calls: dict[str, Origin]) -> Any:
    """An assistant message masking copied to clear call arguments, as the piece (message
    index, "calls", {block index: new input}); None for any other message."""
    found = [c for c in m.get("tool_calls") or [] if c.get("id") in calls] \
        if m.get("role") == "assistant" else []
    if not found:
        return None
    inputs = {calls[c["id"]][1]: json.loads(c["function"]["arguments"]) for c in found
              if is_cleared(c["function"]["arguments"])}
    return (calls[found[0]["id"]][0], "calls", inputs)


def _rebuild(original: dict[str, Any], parts: dict[Part, Any]) -> dict[str, Any]:
    if "calls" in parts:
        inputs = parts["calls"]
        return {**original, "content": [{**b, "input": inputs[j]} if j in inputs else b
                                         for j, b in enumerate(original["content"])]}
    if "all" in parts:
        return original
    blocks, changed = [], False
    for j, b in enumerate(original["content"]):
        if isinstance(b, dict) and b.get("type") == "tool_result":
            if j not in parts:
                changed = True
            elif parts[j] is None:
                blocks.append(b)
            else:
                blocks.append({**b, "content": parts[j]})
                changed = True
        elif "rest" in parts:
            blocks.append(b)
        else:
            changed = True
    return {**original, "content": blocks} if changed else original
