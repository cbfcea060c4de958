"""Stage 1: large tool-call arguments (``masking.clear_tool_inputs``, SPEC section 4)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from proxy.context.adapters.cleared import is_cleared
from proxy.context.stages.mask import mask_tool_outputs, spill_id
from proxy.context.stages.ordering import ordering_problems
from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import MaskingPolicy, Policy
from proxy.testing import agent

MODEL = "gpt-4o"
WINDOW = 32_000
SPEC = agent.AgentSpec(seed=3, output_tokens=(200, 600), write_every=2,
                       write_tokens=(2000, 4000), plan_every=0)
COUNTER = TokenCounter()


def scope(**masking: Any) -> Scope:
    policy = replace(Policy(), masking=MaskingPolicy(in_steps=False, **masking))
    return Scope(policy, WINDOW, COUNTER, MODEL, tools=agent.CODING_TOOLS)


def calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for m in messages for c in m.get("tool_calls") or []]


def test_old_large_arguments_are_cleared_in_the_same_steps_as_their_results() -> None:
    msgs = agent.conversation(SPEC, 24)
    on = mask_tool_outputs(msgs, scope())
    off = mask_tool_outputs(msgs, scope(clear_tool_inputs=False))
    assert on.triggered and on.inputs and not off.inputs
    assert [s.index for s in on.masked] == [s.index for s in off.masked]  # results: unchanged
    kept = [m["tool_call_id"] for m in msgs if m["role"] == "tool"][-5:]
    by_id = {c["id"]: c for c in calls(msgs)}
    for c in calls(on.messages):
        args = c["function"]["arguments"]
        if c["id"] in kept or c["function"]["name"] != "write_file":
            assert c == by_id[c["id"]]
        else:
            assert is_cleared(args) and isinstance(json.loads(args), dict)
            spill = next(s for s in on.inputs if s.tool_call_id == c["id"])
            assert spill.content == by_id[c["id"]]["function"]["arguments"]
            assert spill.id == spill_id(spill.content) and spill.id[:16] in args
    assert ordering_problems(on.messages) == []
    assert on.messages == mask_tool_outputs(msgs, scope()).messages  # pure: the same bytes
    # the upstream's tokens fall by at least the cleared arguments' share of them
    cleared = sum(s.tokens for s in on.inputs)
    assert off.tokens_after - on.tokens_after >= cleared - 40 * len(on.inputs)
    assert (off.tokens_after - on.tokens_after) / off.tokens_after >= \
        0.95 * cleared / off.tokens_after
    assert COUNTER.count_messages(on.messages, MODEL, agent.CODING_TOOLS) == on.tokens_after


def test_small_arguments_excluded_tools_and_a_threshold_stay() -> None:
    msgs = agent.conversation(SPEC, 24)
    high = mask_tool_outputs(msgs, scope(min_input_tokens=10_000))
    assert not high.inputs and high.masked
    excluded = mask_tool_outputs(msgs, scope(exclude_tools=("write_file",)))
    assert not excluded.inputs and excluded.masked
    small = mask_tool_outputs(agent.conversation(replace(SPEC, write_tokens=(300, 600)), 80),
                              scope())
    assert not small.inputs and small.masked
