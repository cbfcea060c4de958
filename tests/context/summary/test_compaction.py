"""Compaction at the service edge (``proxy.context.summary.compaction.compact``) with a recording
summarizer standing in for the upstream: with the request's own model the summary call rides
the conversation's prefix (its messages as sent, its tools, the instruction last); another
model reads a transcript of the covered range; the list is rewritten around the summary."""

from __future__ import annotations

from typing import Any

import pytest
from factories import agent_session

from proxy.context.offload import run_inline
from proxy.context.stages.compact import plan_compaction
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import is_summary
from proxy.context.stages.summary import RESTORED_INTRO
from proxy.context.summary.compaction import compact, notes_share
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


class LongNotes(Recorder):
    """Answers the calls without tools (notes, transcripts) at far more than they may have."""

    async def __call__(self, prompt: list[dict[str, Any]], max_tokens: int,
                       tools: Any = None) -> str:
        short = await super().__call__(prompt, max_tokens, tools)
        return short if tools else "Noted: the file holds a long list. " * 2_000


def masked_session(outputs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Scope,
                                          Any]:
    """The originals, the list with the first ``outputs`` covered tool results masked (new
    dicts, as masking makes them), its scope at a 12k window and its plan."""
    originals, scope, plan = setup(12_000)
    masked = list(originals)
    results = [i for i in plan.summarize if originals[i].get("role") == "tool"][:outputs]
    for i in results:
        masked[i] = {**originals[i], "content": "[tool output cleared: 600 tokens, spill 0a1b2c3d]"}
    return originals, masked, scope, plan


def summary_model(window: int) -> Scope:
    """The request's own model summarizing within a smaller ``window`` than the request's."""
    return Scope(Policy(), window, COUNTER, MODEL)


async def test_originals_that_fit_go_beside_the_prefix_as_they_are() -> None:
    originals, masked, scope, plan = masked_session(2)
    summarize = Recorder()
    done = await compact(plan, masked, originals, scope, summarize, scope, run_inline)
    assert done.calls == 1
    prompt, _, tools = summarize.calls[0]
    assert tools == TOOLS and prompt[:plan.cut] == masked[:plan.cut]
    assert RESTORED_INTRO in str(prompt[-2]["content"])
    restored = [originals[i]["content"] for i in plan.summarize if masked[i] is not originals[i]]
    assert all(text in str(prompt[-2]["content"]) for text in restored)


async def test_originals_that_do_not_fit_are_condensed_into_notes_beside_the_prefix() -> None:
    originals, masked, scope, plan = masked_session(2)  # their share of the summary: ~200
    summarize = Recorder()
    done = await compact(plan, masked, originals, scope, summarize, summary_model(8_000),
                         run_inline)
    *notes, last = summarize.calls
    assert notes and all(tools is None for _, _, tools in notes)
    assert last[2] == TOOLS and last[0][:plan.cut] == masked[:plan.cut]
    assert RESTORED_INTRO in str(last[0][-2]["content"])
    assert done.calls == len(summarize.calls) and not done.truncated


async def test_no_notes_squeezed_under_the_originals_share_of_the_summary() -> None:
    """Room for notes (over ``MIN_NOTES``) but less than six outputs' share of the summary:
    the covered range is summarized from a transcript instead, the originals' text in it."""
    originals, masked, scope, plan = masked_session(6)  # their share: ~590 tokens
    summarize = Recorder()
    done = await compact(plan, masked, originals, scope, summarize, summary_model(5_400),
                         run_inline)
    assert all(tools is None for _, _, tools in summarize.calls)
    read = "\n".join(str(m.get("content")) for p, _, _ in summarize.calls for m in p)
    restored = [originals[i]["content"] for i in plan.summarize if masked[i] is not originals[i]]
    assert len(restored) == 6 and all(text[:200] in read for text in restored)
    assert done.gain


async def test_notes_that_came_back_cut_are_not_used() -> None:
    originals, masked, scope, plan = masked_session(2)
    summarize = LongNotes()
    done = await compact(plan, masked, originals, scope, summarize, summary_model(8_000),
                         run_inline)
    assert all(tools is None for _, _, tools in summarize.calls)  # none rode the prefix
    assert done.calls == len(summarize.calls) > 1  # the notes' calls are still counted
    assert done.truncated


@pytest.mark.parametrize(("best", "originals", "everything", "share"),
                         [(1200, 1231, 7344, 202), (1200, 0, 7344, 0), (1000, 10, 0, 10_000)])
def test_the_notes_share_is_the_originals_part_of_the_summary(best: int, originals: int,
                                                              everything: int,
                                                              share: int) -> None:
    assert notes_share(best, originals, everything) == share
