"""The OpenAI Responses API (``POST /v1/responses``) read as chat-style messages, and back.

- ``instructions`` is one system message for the stages and goes back as the client sent it.
- A ``message`` item from the user, system or developer is one chat message (text parts joined;
  images marked).
- A turn (what one response of the model produced) is one assistant message: its ``reasoning``
  items, its assistant ``message`` items (their text), its calls (``function_call``,
  ``custom_tool_call``) as ``tool_calls``, and the API's other output items among them (web
  search, file search, shell and MCP calls), in whatever order they came; each output
  (``function_call_output``, ``custom_tool_call_output``) is one ``tool`` message (what masking
  may replace). A turn starts at a ``reasoning`` item, or at an output of the model after an
  output or a message; a turn that began with a ``reasoning`` item runs until the next
  ``reasoning`` item or message, so no call is ever parted from its reasoning.
- Any other item (a type this adapter does not know, a message of a role the API may add) is
  opaque, and ends the turn it follows: a ``developer`` message for the stages, kept verbatim in
  place and never masked or summarized.
- Going back, kept items come back as the client's own objects in their original order; a
  masked output keeps its item with only ``output`` replaced; a call whose arguments masking
  cleared keeps its item with only ``arguments`` replaced (the cleared arguments' JSON object
  text), or for a custom tool call only ``input`` (the placeholder text itself: its input is
  free text); the summary is a user ``message`` item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.context.adapters import (
    Adapted,
    AdapterError,
    arguments_text,
    content_text,
    function_tools,
)
from proxy.context.adapters.cleared import cleared_text, is_cleared

SYSTEM: tuple[int, ...] = ()
ROLES = ("user", "assistant", "system", "developer")
CALLS = {"function_call": "arguments", "custom_tool_call": "input"}  # kind -> its arguments
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# The other items a response of the model produces (the API's own tools): part of its turn.
MODEL_OUTPUTS = frozenset({
    "web_search_call", "file_search_call", "computer_call", "code_interpreter_call",
    "image_generation_call", "local_shell_call", "mcp_call", "mcp_list_tools",
    "mcp_approval_request"})


MARKED = {"input_image": "image", "input_file": "file"}


def _text(content: Any) -> str:
    return content_text(content, MARKED)


@dataclass
class _Turn:
    message: dict[str, Any]
    reasoned: bool  # began with a reasoning item: runs until the next one
    answered: bool = False  # an output came after it
    texts: list[str] = field(default_factory=list)


class _Reader:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.messages: list[dict[str, Any]] = []
        self.origins: dict[int, tuple[int, ...]] = {}  # id(message) -> its item indices
        self.outputs: dict[str, int] = {}  # call_id -> its output item
        self.calls: dict[str, tuple[int, dict[str, Any]]] = {}  # call_id -> (item, its turn)
        self.pending: set[str] = set()
        self.turn: _Turn | None = None
        self.reasoned: set[int] = set()  # indices of messages (turns) that hold reasoning

    def add(self, message: dict[str, Any], items: tuple[int, ...]) -> None:
        self.messages.append(message)
        self.origins[id(message)] = items

    def read(self, items: list[Any]) -> None:
        if self.body.get("instructions"):
            self.add({"role": "system", "content": str(self.body["instructions"])}, SYSTEM)
        for k, item in enumerate(items):
            if not isinstance(item, dict):
                raise AdapterError(f"input[{k}]: expected an object", f"input[{k}]")
            kind = item.get("type", "message" if "role" in item else None)
            if kind is not None and not isinstance(kind, str):
                raise AdapterError(f"input[{k}].type: expected a string", f"input[{k}].type")
            if kind in OUTPUTS:
                self._output(k, item)
            elif kind in CALLS:
                self._call(k, item, CALLS[kind])
            elif kind == "reasoning":
                self._open(k, reasoned=True)
            elif kind == "message" and item.get("role") == "assistant":
                self._turn_for_output(k).texts.append(_text(item.get("content")))
                self._settle()
            elif kind == "message" and item.get("role") in ROLES:
                self._message(k, item)
            elif kind in MODEL_OUTPUTS and self.turn is not None and \
                    (self.turn.reasoned or not self.turn.answered):
                self._join(k)
            else:
                self.turn = None
                self.add({"role": "developer", "content": _text(item.get("content"))}, (k,))
        if self.pending:
            raise AdapterError(f"input: no output for call_id "
                               f"{', '.join(sorted(self.pending))}", "input")

    def _open(self, k: int, *, reasoned: bool) -> _Turn:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        self.turn = _Turn(message, reasoned)
        if reasoned:
            self.reasoned.add(len(self.messages))
        self.add(message, (k,))
        return self.turn

    def _join(self, k: int) -> None:
        assert self.turn is not None
        m = self.turn.message
        self.origins[id(m)] = (*self.origins[id(m)], k)

    def _turn_for_output(self, k: int) -> _Turn:
        """The turn an output of the model at ``k`` belongs to (a new one when the open turn
        has had its outputs answered and did not begin with reasoning)."""
        turn = self.turn
        if turn is None or (turn.answered and not turn.reasoned):
            return self._open(k, reasoned=False)
        self._join(k)
        return turn

    def _settle(self) -> None:
        assert self.turn is not None
        self.turn.message["content"] = "\n".join(t for t in self.turn.texts if t) or None

    def _message(self, k: int, item: dict[str, Any]) -> None:
        if self.pending:
            raise AdapterError(f"input[{k}]: a message between a function_call and its output",
                               f"input[{k}]")
        self.turn = None
        self.add({"role": item["role"], "content": _text(item.get("content"))}, (k,))

    def _call(self, k: int, item: dict[str, Any], key: str) -> None:
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
            raise AdapterError(f"input[{k}]: a {item.get('type')} needs a string call_id and "
                               "name", f"input[{k}]")
        turn = self._turn_for_output(k)
        call = {"id": item["call_id"], "type": "function", "function": {
            "name": item["name"], "arguments": arguments_text(item.get(key), f"input[{k}]")}}
        turn.message.setdefault("tool_calls", []).append(call)
        self.pending.add(item["call_id"])
        self.calls[item["call_id"]] = (k, turn.message)

    def _output(self, k: int, item: dict[str, Any]) -> None:
        cid = item.get("call_id")
        if not isinstance(cid, str) or cid not in self.pending:
            raise AdapterError(f"input[{k}]: {item.get('type')} for a call_id no earlier call "
                               "made", f"input[{k}]")
        self.pending.discard(cid)
        if self.turn is not None:
            self.turn.answered = True
        self.add({"role": "tool", "tool_call_id": cid, "content": _text(item.get("output"))},
                 (k,))
        self.outputs[cid] = k


def _turn_of(m: dict[str, Any], calls: dict[str, tuple[int, dict[str, Any]]]
             ) -> dict[str, Any] | None:
    """The turn an assistant message masking copied (to clear call arguments) stands for."""
    if m.get("role") != "assistant":
        return None
    for c in m.get("tool_calls") or []:
        if c.get("id") in calls:
            return calls[c["id"]][1]
    return None


def _cleared_items(m: dict[str, Any], items: list[Any],
                   calls: dict[str, tuple[int, dict[str, Any]]],
                   origin: tuple[int, ...]) -> list[tuple[int, Any]]:
    """The items of a turn, the calls whose arguments masking cleared replaced."""
    new: dict[int, Any] = {}
    for c in m.get("tool_calls") or []:
        args = c["function"]["arguments"]
        if c.get("id") in calls and is_cleared(args):
            k = calls[c["id"]][0]
            key = CALLS[items[k]["type"]]
            new[k] = {**items[k], key: args if key == "arguments" else cleared_text(args)}
    return [(k, new.get(k, items[k])) for k in origin]


def read(body: dict[str, Any]) -> Adapted:
    """The request for the stages; ``AdapterError`` when it breaks the API's rules."""
    r = _Reader(body)
    raw = body.get("input")
    if not isinstance(raw, str | list):
        raise AdapterError("input: expected a string or a list of items", "input")
    items: list[Any] = [{"type": "message", "role": "user", "content": raw}] \
        if isinstance(raw, str) else raw
    r.read(items)

    def items_of(out: Sequence[dict[str, Any]]) -> list[Any]:
        """The items for the stages' list: runs of the client's items in their original
        order, split where a new message (the summary) stands."""
        got: list[Any] = []
        run: list[tuple[int, Any]] = []
        for m in out:
            origin = r.origins.get(id(m))
            if origin is not None:
                run += [(k, items[k]) for k in origin]
            elif m.get("role") == "tool" and m.get("tool_call_id") in r.outputs:
                k = r.outputs[m["tool_call_id"]]
                run.append((k, {**items[k], "output": m.get("content")}))
            elif (turn := _turn_of(m, r.calls)) is not None:
                run += _cleared_items(m, items, r.calls, r.origins[id(turn)])
            else:
                got += [item for _, item in sorted(run, key=lambda p: p[0])]
                run = []
                role = m.get("role") if m.get("role") in ROLES else "user"
                got.append({"type": "message", "role": role,
                            "content": str(m.get("content") or "")})
        return got + [item for _, item in sorted(run, key=lambda p: p[0])]

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
                   raw_tools=body.get("tools"), body=body,
                   reasoning=body.get("reasoning") is not None or bool(r.reasoned),
                   reasoned=frozenset(r.reasoned))
