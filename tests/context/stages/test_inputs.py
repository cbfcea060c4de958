"""Large tool-call arguments (``proxy.context.stages.inputs``): which calls may have their
arguments cleared (over ``min_input_tokens``, not protected, not excluded, not cleared already,
only while ``clear_tool_inputs`` is on), and the copy of a message with new arguments."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from proxy.context.adapters.cleared import cleared_arguments
from proxy.context.stages.inputs import call_sites, clear_calls
from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import MaskingPolicy, Policy

COUNTER = TokenCounter()
BIG = json.dumps({"path": "a.py", "content": "value = compute(x)\n" * 600})


def call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def scope(**masking: Any) -> Scope:
    return Scope(replace(Policy(), masking=MaskingPolicy(**masking)), 32_000, COUNTER, "gpt-4o")


MESSAGES = [{"role": "user", "content": "write it"},
            {"role": "assistant", "content": None, "tool_calls": [
                call("c1", "write_file", BIG), call("c2", "read_file", '{"p": 1}')]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            {"role": "assistant", "content": "<memory>keep</memory>",
             "tool_calls": [call("c3", "write_file", BIG)]}]


def test_only_big_unprotected_calls_may_be_cleared() -> None:
    sites = call_sites(MESSAGES, scope(), never=set())
    assert list(sites) == ["c1"]  # c2 is small, c3's message is protected (<memory>)
    site = sites["c1"]
    assert (site.index, site.position) == (1, 0) and site.tokens > 1000
    assert 0 < site.saving < site.tokens
    assert call_sites(MESSAGES, scope(), never={"write_file"}) == {}
    assert call_sites(MESSAGES, scope(clear_tool_inputs=False), never=set()) == {}
    assert call_sites(MESSAGES, scope(min_input_tokens=100_000), never=set()) == {}


def test_cleared_calls_are_not_cleared_again_and_copies_keep_the_rest() -> None:
    text = cleared_arguments("[tool input cleared: 5,000 tokens from write_file; spill ab]")
    cleared = clear_calls(MESSAGES[1], {0: text})
    assert cleared["tool_calls"][0]["function"]["arguments"] == text
    assert cleared["tool_calls"][1] is MESSAGES[1]["tool_calls"][1]
    assert MESSAGES[1]["tool_calls"][0]["function"]["arguments"] == BIG  # the original stands
    again = [MESSAGES[0], cleared, *MESSAGES[2:4]]
    assert call_sites(again, scope(), never=set()) == {}
