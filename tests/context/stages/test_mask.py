"""Stage 1: tool-output masking (SPEC section 4)."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import replace
from typing import Any

from factories import (
    assistant,
    hellos,
    parallel_turn,
    system,
    tool_call,
    tool_result,
    tool_turn,
    user,
    words,
)

from proxy.context.stages.mask import is_placeholder, mask_tool_outputs, placeholder
from proxy.context.stages.ordering import ordering_problems
from proxy.context.stages.scope import Scope
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import MaskingPolicy, Policy, ProtectedRule

MODEL = "gpt-4o"
WINDOW = 6_000


def session(n: int = 10, size: int = 400, name: str = "read_file") -> list[dict[str, Any]]:
    msgs = [system(), user("Investigate the outage.")]
    for t in range(n):
        msgs += tool_turn(name, words(size, t), {"path": f"f{t}"})
    return msgs


def results(msgs: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(msgs) if m["role"] == "tool"]


# The steps of the SPEC's worked examples: these tests are about what a step clears and how, not
# when it pays for itself (masking.min_step_turns, test_mask_steps.py and bench/session_matrix.py).
SEED_STEPS = replace(Policy(), masking=MaskingPolicy(priced=False))
MOVING = replace(Policy(), masking=MaskingPolicy(in_steps=False))  # the boundary moves each turn


def test_masks_all_but_the_newest_keep_recent() -> None:
    msgs = session()
    res = mask_tool_outputs(msgs, Scope(MOVING, WINDOW, TokenCounter(), MODEL))
    idx = results(msgs)
    assert res.triggered
    assert [m["content"] for m in (res.messages[i] for i in idx[-5:])] == \
        [msgs[i]["content"] for i in idx[-5:]]
    assert all(is_placeholder(res.messages[i]["content"]) for i in idx[:-5])
    assert [s.index for s in res.masked] == idx[:-5]
    assert res.tokens_after == res.tokens_before - res.tokens_freed < res.tokens_before


def test_placeholder_names_tool_tokens_and_spill() -> None:
    msgs = session(n=6, size=12_431)
    counter = TokenCounter()
    res = mask_tool_outputs(msgs, Scope(SEED_STEPS, 100_000, counter, MODEL))
    spill = res.masked[0]
    original = msgs[spill.index]["content"]
    assert spill.id == hashlib.sha256(original.encode()).hexdigest()
    assert spill.content == original and spill.tool_name == "read_file"
    assert spill.tool_call_id == msgs[spill.index]["tool_call_id"]
    assert spill.tokens == counter.text_tokens(original, MODEL)
    text = res.messages[spill.index]["content"]
    assert text == placeholder("read_file", spill.tokens, spill.id)
    assert text.startswith(f"[tool output cleared: {spill.tokens:,} tokens from read_file;")
    assert "," in f"{spill.tokens:,}"


def test_same_output_gets_the_same_spill_id() -> None:
    msgs = [system(), user()]
    for _ in range(8):
        msgs += tool_turn("cat", words(300, 42))
    res = mask_tool_outputs(msgs, Scope(SEED_STEPS, 3_000, TokenCounter(), MODEL))
    assert len({s.id for s in res.masked}) == 1 and len(res.masked) == 3


def test_structure_is_untouched_and_input_not_mutated() -> None:
    msgs = session()
    frozen = copy.deepcopy(msgs)
    res = mask_tool_outputs(msgs, Scope(SEED_STEPS, WINDOW, TokenCounter(), MODEL))
    assert msgs == frozen
    assert len(res.messages) == len(msgs)
    for before, after in zip(msgs, res.messages, strict=True):
        assert {k: v for k, v in before.items() if k != "content"} == \
            {k: v for k, v in after.items() if k != "content"}
        if before["role"] != "tool":
            assert before is after
    assert ordering_problems(res.messages) == []


def test_trigger_and_switches() -> None:
    msgs = session()
    counter = TokenCounter()
    total = counter.count_messages(msgs, MODEL)
    below = int(total / 0.55) + 10  # the transcript is just under 55% of this window
    assert not mask_tool_outputs(msgs, Scope(SEED_STEPS, below, counter, MODEL)).triggered
    assert mask_tool_outputs(msgs, Scope(SEED_STEPS, below - 30, counter, MODEL)).triggered
    assert not mask_tool_outputs(msgs, Scope(SEED_STEPS, None, counter, MODEL)).triggered
    off = Policy(masking=MaskingPolicy(priced=False, enabled=False))
    res = mask_tool_outputs(msgs, Scope(off, WINDOW, counter, MODEL))
    assert not res.triggered and res.messages == msgs and not res.masked


def test_worked_example_trigger_on_200k_window() -> None:
    counter = TokenCounter()
    base = session(n=8, size=2_000)

    def padded(total: int) -> list[dict[str, Any]]:
        msgs = copy.deepcopy(base)
        msgs[1] = user("x")
        msgs[1] = user("x" + hellos(total - counter.count_messages(msgs, MODEL)))
        assert counter.count_messages(msgs, MODEL) == total
        return msgs

    assert not mask_tool_outputs(padded(110_000),
                                 Scope(MOVING, 200_000, counter, MODEL)).triggered
    res = mask_tool_outputs(padded(110_001), Scope(MOVING, 200_000, counter, MODEL))
    assert res.triggered and len(res.masked) == 3
    # In steps, a step that frees less than min_free_ratio x window (here 6,000 < 10,000) waits.
    waiting = mask_tool_outputs(padded(110_001), Scope(SEED_STEPS, 200_000, counter, MODEL))
    assert waiting.masked == []
    eager = replace(Policy(), masking=MaskingPolicy(priced=False, min_free_ratio=0.0))
    assert len(mask_tool_outputs(padded(110_001),
                                 Scope(eager, 200_000, counter, MODEL)).masked) == 3


def test_excluded_pinned_and_protected_are_never_masked() -> None:
    policy = replace(Policy(), masking=MaskingPolicy(priced=False, keep_recent=1,
                                                     exclude_tools=("search",)))
    policy = replace(policy, compaction=replace(policy.compaction, protected=(
        ProtectedRule(marker="<memory>"), ProtectedRule(name="notes"),
        ProtectedRule(name="recall"))))
    big = words(500, 7)
    msgs = [system(), user()]
    msgs += tool_turn("search", big)
    msgs += tool_turn("write_todos", big)
    msgs += tool_turn("read_file", "<memory>" + big)
    msgs += tool_turn("recall", big)  # protected by the tool's name
    call = tool_call("read_file")
    msgs += [assistant(None, call), tool_result(call, big, name="notes")]
    msgs += tool_turn("read_file", big)  # the only one to mask
    msgs += tool_turn("read_file", big)  # the newest: kept
    res = mask_tool_outputs(msgs, Scope(policy, 2_000, TokenCounter(), MODEL))
    idx = results(msgs)
    assert [s.index for s in res.masked] == [idx[-2]]


def test_parallel_results_resolve_their_own_tool_names() -> None:
    msgs = [system(), user(), *parallel_turn({"read_file": words(400), "grep": words(400, 1)})]
    msgs += tool_turn("ls", "a b c") * 1
    policy = replace(Policy(), masking=MaskingPolicy(keep_recent=1, in_steps=False))
    res = mask_tool_outputs(msgs, Scope(policy, 1_000, TokenCounter(), MODEL))
    assert [s.tool_name for s in res.masked] == ["read_file", "grep"]
    assert "from grep;" in res.messages[4]["content"]


def test_short_outputs_and_placeholders_stay() -> None:
    msgs = [system(), user(words(3000))]
    msgs += tool_turn("ls", "a.py b.py")
    msgs += tool_turn("cat", placeholder("cat", 9_999, "ab" * 32))
    msgs += tool_turn("cat", "")
    policy = replace(Policy(), masking=MaskingPolicy(priced=False, keep_recent=0))
    res = mask_tool_outputs(msgs, Scope(policy, 1_000, TokenCounter(), MODEL))
    assert res.triggered and res.masked == [] and res.messages == msgs


def test_content_parts_are_masked_and_spilled_whole() -> None:
    parts = [{"type": "text", "text": words(600)}, {"type": "text", "text": words(600, 3)}]
    msgs = [system(), user(), *tool_turn("browse", "x"), *tool_turn("ls", "y")]
    msgs[3]["content"] = parts
    policy = replace(Policy(), masking=MaskingPolicy(priced=False, keep_recent=1))
    res = mask_tool_outputs(msgs, Scope(policy, 1_000, TokenCounter(), MODEL))
    assert res.masked[0].content == parts
    canonical = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert res.masked[0].id == hashlib.sha256(canonical.encode()).hexdigest()


def test_deterministic_bytes_across_counters() -> None:
    msgs = session(n=12)
    a = mask_tool_outputs(msgs, Scope(SEED_STEPS, WINDOW, TokenCounter(), MODEL))
    b = mask_tool_outputs(json.loads(json.dumps(msgs)),
                                                Scope(SEED_STEPS, WINDOW, TokenCounter(), MODEL))
    assert json.dumps(a.messages) == json.dumps(b.messages)


def test_tools_schemas_count_toward_the_trigger() -> None:
    msgs = session()
    counter = TokenCounter()
    total = counter.count_messages(msgs, MODEL)
    window = int(total / 0.55) + 10
    schema = [{"type": "function", "function": {"name": "f", "description": words(200)}}]
    assert not mask_tool_outputs(msgs, Scope(SEED_STEPS, window, counter, MODEL)).triggered
    assert mask_tool_outputs(msgs, Scope(SEED_STEPS, window, counter, MODEL, schema)).triggered
