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
