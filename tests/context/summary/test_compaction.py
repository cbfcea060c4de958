"""Compaction at the service edge (``proxy.context.summary.compaction.compact``) with a recording
summarizer standing in for the upstream: with the request's own model the summary call rides
the conversation's prefix (its messages as sent, its tools, the instruction last); another
model reads a transcript of the covered range; the list is rewritten around the summary."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from factories import agent_session
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.offload import run_inline
from proxy.context.stages.compact import plan_compaction
from proxy.context.stages.mask import placeholder
from proxy.context.stages.reading import RESTORED_SHARE, UNREAD_HEADING
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import is_summary
from proxy.context.stages.summary import RESTORED_INTRO
from proxy.context.summary.compaction import compact
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import Policy
from proxy.testing.agent import TOOLS

COUNTER = TokenCounter()
MODEL = "gpt-4o"


class Recorder:
    """A summarizer that records each call (prompt, max tokens, tools) and answers briefly."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], int, Any]] = []

    async def __call__(self, prompt: list[dict[str, Any]], max_tokens: int,
                       tools: Any = None) -> str:
        self.calls.append((prompt, max_tokens, tools))
        return "Goal: refactor the module. Done so far: read every file."


def setup(window: int = 20_000) -> tuple[list[dict[str, Any]], Scope, Any]:
    messages = agent_session(turns=12, output_tokens=600)
    scope = Scope(Policy(), window, COUNTER, MODEL, TOOLS)
    plan = plan_compaction(messages, scope, force=True)
    assert plan is not None and plan.summarizable
    return messages, scope, plan


async def test_the_same_model_rides_the_conversations_prefix() -> None:
    messages, scope, plan = setup()
    summarize = Recorder()
    done = await compact(plan, messages, messages, scope, summarize, scope, run_inline)
    assert done.calls == 1 and done.status == "compacted" and done.gain
    prompt, _, tools = summarize.calls[0]
    assert prompt[:plan.cut] == messages[:plan.cut] and tools == TOOLS  # the cached prefix
    assert done.tokens_after < plan.tokens_before
    assert any(is_summary(m) for m in done.messages) and len(done.messages) < len(messages)
    assert done.summary.startswith("Goal:") and not done.truncated


async def test_another_model_reads_a_transcript_of_the_covered_range() -> None:
    messages, scope, plan = setup()
    summarize = Recorder()
    other = Scope(Policy(), 20_000, COUNTER, "gpt-4o-mini")
    done = await compact(plan, messages, messages, scope, summarize, other, run_inline)
    prompt, _, tools = summarize.calls[0]
    assert tools is None and prompt[:2] != messages[:2]  # a transcript, not the prefix
    assert done.gain


async def test_originals_must_align_with_the_masked_list() -> None:
    messages, scope, plan = setup()
    with pytest.raises(ValueError, match="align"):
        await compact(plan, messages, messages[:-1], scope, Recorder(), scope, run_inline)


def masked_session(outputs: int, window: int = 12_000
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Scope, Any]:
    """The originals, the list with the first ``outputs`` covered tool results masked (new
    dicts, as masking makes them, each with its own spill id), its scope at ``window`` and its
    plan."""
    originals, scope, plan = setup(window)
    masked = list(originals)
    results = [i for i in plan.summarize if originals[i].get("role") == "tool"][:outputs]
    for n, i in enumerate(results):
        masked[i] = {**originals[i], "content": placeholder("read_file", 600, f"{n + 1:016x}" * 4)}
    return originals, masked, scope, plan


def summary_model(window: int) -> Scope:
    """The request's own model summarizing within a smaller ``window`` than the request's."""
    return Scope(Policy(), window, COUNTER, MODEL)


def restored_of(originals: list[dict[str, Any]], masked: list[dict[str, Any]],
                plan: Any) -> list[str]:
    return [originals[i]["content"] for i in plan.summarize if masked[i] is not originals[i]]


async def test_originals_that_fit_go_beside_the_prefix_as_they_are() -> None:
    originals, masked, scope, plan = masked_session(2)
    summarize = Recorder()
    done = await compact(plan, masked, originals, scope, summarize, scope, run_inline)
    assert done.calls == 1
    prompt, _, tools = summarize.calls[0]
    assert tools == TOOLS and prompt[:plan.cut] == masked[:plan.cut]
    assert RESTORED_INTRO in str(prompt[-2]["content"])
    assert all(text in str(prompt[-2]["content"]) for text in restored_of(originals, masked, plan))
    assert UNREAD_HEADING not in done.summary  # everything was read


async def test_originals_over_the_budget_are_read_newest_first_and_the_rest_listed() -> None:
    originals, masked, scope, plan = masked_session(5, window=14_000)
    summarize = Recorder()
    done = await compact(plan, masked, originals, scope, summarize, scope, run_inline)
    assert done.calls == 1  # one call, on the prefix: no notes, no pieces
    prompt, _, tools = summarize.calls[0]
    assert tools == TOOLS and prompt[:plan.cut] == masked[:plan.cut]
    extra = COUNTER.count_messages(prompt[plan.cut:-1], MODEL)
    assert extra <= RESTORED_SHARE * COUNTER.count_messages(prompt[:plan.cut], MODEL, TOOLS)
    restored = restored_of(originals, masked, plan)
    read = [t in str(prompt[-2]["content"]) for t in restored]
    assert read[-1] and not read[0] and read == sorted(read)  # a newest run of them
    cleared = [str(masked[i]["content"]) for i in plan.summarize if masked[i] is not originals[i]]
    unread = [c for c, r in zip(cleared, read, strict=True) if not r]
    assert done.summary.split(UNREAD_HEADING)[1].split("\n- ")[1:] == unread


async def test_a_transcript_reads_originals_within_one_window_and_lists_the_rest() -> None:
    originals, masked, scope, plan = masked_session(8, window=14_000)
    summarize = Recorder()
    other = Scope(Policy(), 5_000, COUNTER, "gpt-4o-mini")
    done = await compact(plan, masked, originals, scope, summarize, other, run_inline)
    sent = sum(COUNTER.count_messages(p, "gpt-4o-mini") for p, _, _ in summarize.calls)
    assert sent <= 5_000
    read = "\n".join(str(m.get("content")) for p, _, _ in summarize.calls for m in p)
    restored = restored_of(originals, masked, plan)
    unread = [t for t in restored if t not in read]
    assert unread and len(unread) < len(restored)
    assert done.summary.count("\n- [tool output cleared: ") == len(unread)


async def test_a_rolling_summary_carries_the_earlier_list() -> None:
    originals, masked, scope, plan = masked_session(8, window=14_000)
    first = await compact(plan, masked, originals, scope, Recorder(), scope, run_inline)
    listed = first.summary.split(UNREAD_HEADING)[1]
    grown = [*first.messages, *agent_session(turns=12, output_tokens=600)[2:]]
    again = plan_compaction(grown, scope, force=True)
    assert again is not None and again.summarizable
    second = await compact(again, grown, grown, scope, Recorder(), scope, run_inline)
    assert listed.strip() in second.summary


@settings(max_examples=15, deadline=None)
@given(outputs=st.integers(0, 12), window=st.sampled_from([9_000, 14_000, 30_000]),
       other=st.booleans())
def test_no_compaction_sends_more_uncached_than_one_window(outputs: int, window: int,
                                                           other: bool) -> None:
    """Whatever the masked share, the summary calls send at most one window beyond the
    cached prefix, and every cleared output is read or listed."""
    originals, masked, scope, plan = masked_session(outputs, window=window)
    summarize = Recorder()
    by = Scope(Policy(), window, COUNTER, "gpt-4o-mini") if other else scope
    done = asyncio.run(compact(plan, masked, originals, scope, summarize, by, run_inline))
    fresh = 0
    for prompt, _, tools in summarize.calls:
        cached = plan.cut if tools else 0
        fresh += COUNTER.count_messages(prompt[cached:], by.model)
    assert fresh <= window
    read = "\n".join(str(m.get("content")) for p, _, _ in summarize.calls for m in p)
    for i in plan.summarize:
        if masked[i] is not originals[i]:
            assert originals[i]["content"] in read or str(masked[i]["content"]) in done.summary
