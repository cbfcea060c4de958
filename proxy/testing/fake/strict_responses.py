"""What the real OpenAI Responses API refuses, as pure checks (see ``strict_apis``, whose
contract they share: ``None`` when the real API would accept the body, else its refusal)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from proxy.testing.fake.strict_apis import Refusal

# Input item types the Responses API knows; any other ``type`` is refused.
RESPONSES_ITEM_TYPES = frozenset({
    "message", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "reasoning", "local_shell_call", "local_shell_call_output",
    "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "web_search_call", "file_search_call", "computer_call", "computer_call_output",
    "code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools",
    "mcp_approval_request", "mcp_approval_response", "compaction", "item_reference",
    "compaction_trigger", "configuration_update", "additional_tools", "program",
    "program_output",
})
RESPONSES_ROLES = ("assistant", "system", "developer", "user")
# The content part types of a message's content list, by role (any role but the assistant's:
# "user").
PARTS = {"assistant": ("output_text", "refusal"),
         "user": ("input_text", "input_image", "input_file")}
# A call item type and the type of the item that answers it, with their names in the wording.
CALLS = {"function_call": ("function_call_output", "function call"),
         "custom_tool_call": ("custom_tool_call_output", "custom tool call")}
OUTPUTS = {out: (call, name) for call, (out, name) in CALLS.items()}


def check_responses(body: Mapping[str, Any], reasoning_of: Mapping[str, str],
                    dropped: Collection[str] = ()) -> Refusal | None:
    """The first thing the real Responses API refuses in ``body``.

    Checked: item types and message roles it does not know; an output (``function_call_output``,
    ``custom_tool_call_output``) whose call is not earlier in ``input``, and a call whose output
    is not later (both skipped when ``previous_response_id`` or ``conversation`` brings stored
    items); an item carrying the id of one the fake issued after a reasoning item
    (``reasoning_of``: item id -> reasoning id) without that reasoning item before it in the same
    turn (since the last user message) unless the fake itself dropped that reasoning item
    (``dropped``: its prefix had changed), and a reasoning item the fake issued that is not
    followed by an assistant item (it ends the input, or a user message, a tool output or
    another reasoning item comes next). Items without ids are not checked for reasoning.
    """
    items = body.get("input")
    if not isinstance(items, list):
        return None
    return (_item_kinds(items)
            or (None if body.get("previous_response_id") or body.get("conversation")
                else _pairs(items))
            or _reasoning(items, reasoning_of, dropped) or _following(items, reasoning_of))


def _item_kinds(items: list[Any]) -> Refusal | None:
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            return Refusal(f"Invalid type for 'input[{n}]': expected an object.", f"input[{n}]")
        kind = item.get("type", "message")
        if kind not in RESPONSES_ITEM_TYPES:
            return Refusal(_invalid(kind, sorted(RESPONSES_ITEM_TYPES)), f"input[{n}].type")
        if kind == "message" and item.get("role") not in RESPONSES_ROLES:
            return Refusal(_invalid(item.get("role"), RESPONSES_ROLES), f"input[{n}].role")
        parts = item.get("content") if kind == "message" else None
        allowed = PARTS["assistant" if item.get("role") == "assistant" else "user"]
        for j, part in enumerate(parts if isinstance(parts, list) else []):
            if isinstance(part, dict) and part.get("type") not in allowed:
                return Refusal(_invalid(part.get("type"), allowed), f"input[{n}].content[{j}]")
    return None


def _invalid(value: Any, supported: Sequence[str]) -> str:
    """OpenAI's wording for a value out of an enumeration."""
    quoted = [f"'{v}'" for v in supported]
    listed = (" and ".join(quoted) if len(quoted) < 3
              else ", ".join(quoted[:-1]) + ", and " + quoted[-1])
    return f"Invalid value: '{value}'. Supported values are: {listed}."


def _pairs(items: list[Any]) -> Refusal | None:
    calls: dict[str, str] = {}  # call_id -> call item type, in input order
    answered: set[str] = set()
    for item in items:
        kind, call_id = item.get("type"), str(item.get("call_id"))
        if kind in CALLS:
            calls[call_id] = kind
        elif kind in OUTPUTS:
            if calls.get(call_id) != OUTPUTS[kind][0]:
                return Refusal(f"No tool call found for {OUTPUTS[kind][1]} output with call_id "
                               f"{call_id}.", "input")
            answered.add(call_id)
    for call_id, kind in calls.items():
        if call_id not in answered:
            return Refusal(f"No tool output found for {CALLS[kind][1]} {call_id}.", "input")
    return None


def _reasoning(items: list[Any], reasoning_of: Mapping[str, str], dropped: Collection[str]
               ) -> Refusal | None:
    seen: set[str] = set()  # reasoning ids since the last user message
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            seen = set()
        item_id = item.get("id")
        if kind == "reasoning" and isinstance(item_id, str):
            seen.add(item_id)
        needed = reasoning_of.get(item_id) if isinstance(item_id, str) else None
        if needed is not None and needed not in seen and needed not in dropped:
            return Refusal(f"Item '{item_id}' of type '{kind}' was provided without its "
                           f"required 'reasoning' item: '{needed}'.", "input")
    return None


def _following(items: list[Any], reasoning_of: Mapping[str, str]) -> Refusal | None:
    issued = set(reasoning_of.values())
    for n, item in enumerate(items):
        if item.get("type") != "reasoning" or item.get("id") not in issued:
            continue
        after = items[n + 1] if n + 1 < len(items) else None
        kind = after.get("type", "message") if after is not None else None
        if after is None or kind in ("reasoning", *OUTPUTS) or (
                kind == "message" and after.get("role") != "assistant"):
            return Refusal(f"Item '{item['id']}' of type 'reasoning' was provided without its "
                           "required following item.", "input")
    return None
