"""Large tool-call arguments (``masking.clear_tool_inputs``, SPEC section 4), pure.

A coding agent's ``write_file`` call carries a whole file in its arguments, resent every turn.
Masking clears the arguments of a call in the same step that clears its result: when the call
is older than the newest ``keep_recent`` results and its arguments have more than
``masking.min_input_tokens`` tokens. The arguments become a JSON object text that keeps the
call valid in every API, ``{"cleared": "[tool input cleared: 6,120 tokens from write_file;
spill 3f9a…]"}`` (the Messages adapter sends it as the ``input`` object, the Responses adapter
as ``arguments``, or as the bare placeholder text for a custom tool call's ``input``); the
original arguments are kept as a spill, like an output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.adapters.cleared import cleared_arguments, input_placeholder, is_cleared
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import is_protected

_COUNTS: dict[tuple[str, str], int] = {}
_COUNTS_LIMIT = 20_000


@dataclass(frozen=True)
class Site:
    """Where a result's call is: the assistant message's index and the call's position in its
    ``tool_calls``, the arguments' tokens and what clearing them frees."""

    index: int
    position: int
    tokens: int
    saving: int


def _tokens(scope: Scope, text: str) -> int:
    key = (scope.counter.encoding_name(scope.model), text)
    found = _COUNTS.get(key)
    if found is None:
        if len(_COUNTS) >= _COUNTS_LIMIT:
            _COUNTS.clear()
        found = _COUNTS[key] = scope.counter.text_tokens(text, scope.model)
    return found


def call_sites(messages: Sequence[Mapping[str, Any]], scope: Scope,
               never: set[str]) -> dict[str, Site]:
    """Call id → its ``Site``, for every call whose arguments may be cleared (none when
    ``clear_tool_inputs`` is off). A token is at least one character, so arguments shorter
    than ``min_input_tokens`` characters are never counted."""
    mp = scope.policy.masking
    if not mp.clear_tool_inputs:
        return {}
    rules = scope.policy.compaction.protected
    sites: dict[str, Site] = {}
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not isinstance(calls, list) or is_protected(m, rules):
            continue
        for pos, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(call.get("id"), str):
                continue
            args, name = fn.get("arguments"), str(fn.get("name") or "")
            if not isinstance(args, str) or len(args) <= mp.min_input_tokens or \
                    name in never or is_cleared(args):
                continue
            tokens = _tokens(scope, args)
            if tokens > mp.min_input_tokens:
                text = cleared_arguments(input_placeholder(name, tokens, "0" * 64, 16))
                sites[call["id"]] = Site(i, pos, tokens, max(0, tokens - _tokens(scope, text)))
    return sites


def clear_calls(message: Mapping[str, Any], cleared: Mapping[int, str]) -> dict[str, Any]:
    """A copy of an assistant ``message`` whose calls at the positions of ``cleared`` carry
    the new arguments text; everything else is the message's own."""
    calls = [{**c, "function": {**c["function"], "arguments": cleared[k]}} if k in cleared
             else c for k, c in enumerate(message["tool_calls"])]
    return {**message, "tool_calls": calls}
