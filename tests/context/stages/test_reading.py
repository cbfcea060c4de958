"""Which masked originals a summary reads (``proxy.context.stages.reading``): the newest first
within the budget, each whole; everything else cleared is listed by its placeholder, an
earlier summary's list carried first, each entry once."""

from __future__ import annotations

import json
from typing import Any

from factories import agent_session

from proxy.context.adapters.cleared import cleared_arguments, input_placeholder
from proxy.context.stages.mask import placeholder
from proxy.context.stages.reading import (
    UNREAD_HEADING,
    choose,
    listed,
    restored_block,
    unread_entries,
    with_unread,
)
from proxy.context.stages.shared import SUMMARY_OPEN
from proxy.context.tokens.counter import TokenCounter

COUNTER = TokenCounter()
MODEL = "gpt-4o"


def session(sizes: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """Originals with one result per size, the list with every result masked, the results."""
    originals = agent_session(turns=len(sizes), output_tokens=100)
    results = [i for i, m in enumerate(originals) if m.get("role") == "tool"]
    masked = list(originals)
    for n, (i, size) in enumerate(zip(results, sizes, strict=True)):
        originals[i] = {**originals[i], "content": "word " * size}
        masked[i] = {**originals[i],
                     "content": placeholder("read_file", size, f"{n + 1:016x}" * 4)}
    return originals, masked, results


def cost(message: dict[str, Any]) -> int:
    return COUNTER.text_tokens(restored_block(message), MODEL) + 2


def test_the_newest_are_read_within_the_budget_and_the_rest_listed() -> None:
    originals, masked, results = session([100, 100, 100, 100])
    budget = sum(cost(originals[i]) for i in results[-2:])
    reading = choose(masked, originals, range(len(masked)), budget, COUNTER, MODEL)
    assert reading.read == tuple(results[-2:])
    assert reading.unread == tuple(masked[i]["content"] for i in results[:2])


def test_one_too_large_is_passed_over_for_older_smaller_ones() -> None:
    originals, masked, results = session([100, 100, 900, 100])
    budget = cost(originals[results[-1]]) + cost(originals[results[0]]) + 5
    reading = choose(masked, originals, range(len(masked)), budget, COUNTER, MODEL)
    assert reading.read == (results[1], results[3])
    assert reading.unread == (masked[results[0]]["content"], masked[results[2]]["content"])


def test_a_zero_budget_reads_nothing_and_lists_all() -> None:
    originals, masked, _ = session([50, 60])
    reading = choose(masked, originals, range(len(masked)), 0, COUNTER, MODEL)
    assert reading.read == () and len(reading.unread) == 2


def test_outside_the_covered_range_nothing_is_read_or_listed() -> None:
    originals, masked, results = session([50, 60, 70])
    reading = choose(masked, originals, range(results[1]), 10_000, COUNTER, MODEL)
    assert reading.read == (results[0],) and reading.unread == ()


def test_cleared_inputs_and_an_earlier_summarys_list_are_listed() -> None:
    originals, masked, results = session([50, 60])
    call_at = results[0] - 1
    cleared = input_placeholder("write_file", 2_000, "ab" * 32, 16)
    call = masked[call_at]["tool_calls"][0]
    masked[call_at] = {**masked[call_at], "tool_calls": [
        {**call, "function": {**call["function"], "arguments": cleared_arguments(cleared)}}]}
    earlier = placeholder("grep", 900, "cd" * 32)
    summary = {"role": "user", "content": with_unread(f"{SUMMARY_OPEN}\nGoal: refactor.",
                                                       [earlier])}
    masked, originals = [masked[0], summary, *masked[1:]], [originals[0], summary,
                                                            *originals[1:]]
    entries = unread_entries(masked, originals, range(len(masked)), set())
    assert entries[0] == earlier and entries[1] == cleared
    assert len(entries) == 4 and len(set(entries)) == 4
    assert json.loads(masked[call_at + 1]["tool_calls"][0]["function"]["arguments"])


def test_the_list_reads_back_and_is_absent_when_empty() -> None:
    entries = [placeholder("read_file", 10, "ef" * 32), placeholder("grep", 20, "01" * 32)]
    text = with_unread("Goal: ship it.", entries)
    assert text.startswith("Goal: ship it.") and UNREAD_HEADING in text
    assert listed(text) == entries
    assert with_unread("Goal: ship it.", []) == "Goal: ship it."
    assert listed("Goal: ship it. [tool output cleared: 5 tokens from x; spill "
                  f"{'0' * 16}]") == []
