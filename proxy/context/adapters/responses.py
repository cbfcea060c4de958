"""The OpenAI Responses API (``POST /v1/responses``) read as chat-style messages, and back.

- ``instructions`` is one system message for the stages and goes back as the client sent it.
- A ``message`` item is one chat message (text parts joined; images marked).
- Consecutive ``function_call`` items are one assistant message with their ``tool_calls``; a
  ``function_call_output`` item is one ``tool`` message (what masking may replace).
- ``reasoning`` items and any item the adapter does not know travel with the next message (or,
  at the end, the one before): never edited, dropped only when what they belong to is
  summarized.
- Going back, every kept message is the client's own items; a masked output keeps its item with
  only ``output`` replaced; the summary is a user ``message`` item.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from proxy.context.adapters import Adapted, AdapterError, content_text, function_tools

SYSTEM: tuple[int, ...] = ()
ROLES = ("user", "assistant", "system", "developer")


MARKED = {"input_image": "image", "input_file": "file"}


def _text(content: Any) -> str:
    return content_text(content, MARKED)


class _Reader:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.messages: list[dict[str, Any]] = []
        self.origins: dict[int, tuple[int, ...]] = {}  # id(message) -> its item indices
        self.outputs: dict[str, int] = {}  # call_id -> its function_call_output item
        self.pending: set[str] = set()
        self._carry: list[int] = []  # opaque items waiting for the next message

    def add(self, message: dict[str, Any], items: list[int]) -> None:
        self.messages.append(message)
        self.origins[id(message)] = (*self._carry, *items)
        self._carry = []

    def read(self, items: list[Any]) -> None:
        if self.body.get("instructions"):
            m = {"role": "system", "content": str(self.body["instructions"])}
            self.messages.append(m)
            self.origins[id(m)] = SYSTEM
        calls: list[int] = []
        for k, item in enumerate(items):
            if not isinstance(item, dict):
                raise AdapterError(f"input[{k}]: expected an object", f"input[{k}]")
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "function_call":
                self._call(k, item)
                calls.append(k)
                continue
            if calls:
                self._calls_message(calls)
                calls = []
            if kind == "message":
                self._message(k, item)
            elif kind == "function_call_output":
                self._output(k, item)
            else:
                self._carry.append(k)
        if calls:
            self._calls_message(calls)
        if self.pending:
            raise AdapterError(f"input: no function_call_output for call_id "
                               f"{', '.join(sorted(self.pending))}", "input")
        if self._carry and self.messages and id(self.messages[-1]) in self.origins:
            last = self.messages[-1]
            self.origins[id(last)] = (*self.origins[id(last)], *self._carry)
            self._carry = []

    def _message(self, k: int, item: dict[str, Any]) -> None:
        if item.get("role") not in ROLES:
            raise AdapterError(f"input[{k}].role: expected one of {', '.join(ROLES)}",
                               f"input[{k}].role")
        if self.pending:
            raise AdapterError(f"input[{k}]: a message between a function_call and its output",
                               f"input[{k}]")
        self.add({"role": item["role"], "content": _text(item.get("content"))}, [k])

    def _call(self, k: int, item: dict[str, Any]) -> None:
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
            raise AdapterError(f"input[{k}]: a function_call needs a string call_id and name",
                               f"input[{k}]")
        self.pending.add(item["call_id"])

    def _calls_message(self, ks: list[int]) -> None:
        items = self.body["input"]
        calls = [{"id": items[k]["call_id"], "type": "function", "function": {
            "name": items[k]["name"], "arguments": _arguments(items[k].get("arguments"))}}
            for k in ks]
        self.add({"role": "assistant", "content": None, "tool_calls": calls}, ks)

    def _output(self, k: int, item: dict[str, Any]) -> None:
        cid = item.get("call_id")
        if not isinstance(cid, str) or cid not in self.pending:
            raise AdapterError(f"input[{k}]: function_call_output for a call_id no earlier "
                               "function_call made", f"input[{k}]")
        self.pending.discard(cid)
        self.add({"role": "tool", "tool_call_id": cid, "content": _text(item.get("output"))},
                 [k])
        self.outputs[cid] = k


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def read(body: dict[str, Any]) -> Adapted:
    """The request for the stages; ``AdapterError`` when it breaks the API's rules."""
    r = _Reader(body)
    raw = body.get("input")
    items: list[Any] = [{"type": "message", "role": "user", "content": raw}] \
        if isinstance(raw, str) else raw if isinstance(raw, list) else []
    if not isinstance(raw, str | list):
        raise AdapterError("input: expected a string or a list of items", "input")
    if isinstance(raw, str):
        r.add({"role": "user", "content": raw}, [0])
        if body.get("instructions"):  # keep the system message first
            r.messages.insert(0, m := {"role": "system", "content": str(body["instructions"])})
            r.origins[id(m)] = SYSTEM
    else:
        r.read(items)

    def items_of(out: Sequence[dict[str, Any]]) -> list[Any]:
        got: list[Any] = []
        for m in out:
            origin = r.origins.get(id(m))
            if origin is not None:
                got += [items[k] for k in origin]
            elif m.get("role") == "tool" and m.get("tool_call_id") in r.outputs:
                got.append({**items[r.outputs[m["tool_call_id"]]], "output": m.get("content")})
            else:
                role = m.get("role") if m.get("role") in ROLES else "user"
                got.append({"type": "message", "role": role,
                            "content": str(m.get("content") or "")})
        return got

    def encode(out: Sequence[dict[str, Any]]) -> dict[str, Any]:
        sent = items_of(out)
        if isinstance(raw, str) and len(sent) == 1 and sent[0] is items[0]:
            return body
        return {**body, "input": sent}

    def prompt(out: Sequence[dict[str, Any]]) -> dict[str, Any]:
        new = [m for m in out if m.get("role") == "system" and id(m) not in r.origins]
        rest = [m for m in out if not any(m is n for n in new)]
        doc: dict[str, Any] = {"input": items_of(rest)}
        if new:
            doc["instructions"] = "\n\n".join(str(m.get("content") or "") for m in new)
        elif body.get("instructions") is not None:
            doc["instructions"] = body["instructions"]
        return doc

    return Adapted("responses", r.messages,
                   function_tools(body.get("tools"), "parameters", typed=True), encode, prompt,
                   raw_tools=body.get("tools"))
