"""Stage 2: compaction (SPEC section 5), with a deterministic fake summarizer."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from factories import (
    FakeSummarizer,
    agent_session,
    assistant,
    compact_list,
    developer,
    hellos,
    parallel_turn,
    prompt_text,
    summary_message,
    system,
    tool_turn,
    user,
    words,
)

from proxy.context.stages.compact import apply_summary, plan_compaction
from proxy.context.stages.ordering import ordering_problems
from proxy.context.stages.plan import plan as plan_request
from proxy.context.stages.reading import UNREAD_HEADING
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import SUMMARY_OPEN, is_summary
from proxy.context.stages.summary import SUMMARY_SECTIONS, SummaryFailed
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import CompactionPolicy, Policy, ProtectedRule

MODEL = "gpt-4o"
Msgs = list[dict[str, Any]]


def policy(**compaction: Any) -> Policy:
    return replace(Policy(), compaction=replace(CompactionPolicy(), **compaction))


def conversation(turns: int = 30, size: int = 300) -> Msgs:
    """Several user turns, each with a couple of tool calls."""
    msgs: Msgs = [system(), developer(), user("Build the report generator.")]
    for t in range(turns):
        if t and t % 5 == 0:
            msgs.append(user(f"Next, handle case {t}."))
        msgs += tool_turn("read_file", words(size, t), {"path": f"src/m{t}.py"})
        msgs.append(assistant(f"Step {t} done."))
    return msgs


async def run(msgs: Msgs, window: int | None, pol: Policy | None = None, **kw: Any) -> Any:
    fake = kw.pop("fake", None) or FakeSummarizer()
    counter = kw.pop("counter", None) or TokenCounter()
    res = await compact_list(msgs, kw.pop("originals", None), pol or Policy(), window, counter,
                             MODEL, fake, kw.pop("summary_window", None), **kw)
    return res, fake


def padded(base: Msgs, total: int, counter: TokenCounter, at: int = 2) -> Msgs:
    """``base`` with message ``at`` padded so the whole request has exactly ``total`` tokens."""
    msgs = copy.deepcopy(base)
    msgs[at] = user("x")
    msgs[at] = user("x" + hellos(total - counter.count_messages(msgs, MODEL)))
    assert counter.count_messages(msgs, MODEL) == total
    return msgs


# --- the worked example --------------------------------------------------------------------


async def test_worked_example_200k() -> None:
    counter = TokenCounter()
    base = conversation(turns=120, size=1_000)
    at_trigger = padded(base, 160_000, counter)
    assert plan_compaction(at_trigger, Scope(Policy(), 200_000, counter, MODEL)) is None
    msgs = padded(base, 160_001, counter)
    plan = plan_compaction(msgs, Scope(Policy(), 200_000, counter, MODEL))
    assert plan is not None and plan.trigger_tokens == 160_000
    keep = counter.message_token_list(msgs[plan.keep_start:], MODEL)
    assert sum(keep) <= 20_000 == plan.keep_budget
    assert sum(keep) + counter.message_tokens(msgs[plan.keep_start - 1], MODEL) > 20_000
    res, fake = await run(msgs, 200_000, counter=counter)
    assert res.status == "compacted"
    assert [mt for _, mt in fake.calls] == [4096]  # min(0.10 × 200,000, summary_max_tokens)
    assert res.messages[-len(msgs[plan.cut:]):] == msgs[plan.cut:]
    res, fake = await run(msgs, 200_000, policy(summary_max_tokens=50_000), counter=counter)
    assert [mt for _, mt in fake.calls] == [20_000]


async def test_unknown_window_compacts_against_the_fallback() -> None:
    counter = TokenCounter()
    msgs = padded(conversation(turns=120, size=1_000), 160_001, counter)
    scope = Scope(Policy(), None, counter, MODEL)
    rewrite = plan_request(msgs, scope)
    assert not rewrite.mask.triggered and rewrite.mask.messages == msgs
    assert scope.compaction_window == 200_000
    assert rewrite.compaction is not None and rewrite.compaction.window == 200_000
    assert plan_compaction(padded(msgs, 160_000, counter),
                                  Scope(Policy(), None, counter, MODEL)) is None


# --- the summary prompt and what the summarizer reads ----------------------------------------


async def test_prompt_asks_for_every_section() -> None:
    res, fake = await run(conversation(), 8_000)
    assert res.status == "compacted"
    instructions = fake.calls[0][0][0]["content"].lower()
    for needle in ("goal", "constraints", "decisions", "reasons", "done", "failed",
                   "current state", "files", "identifiers", "numbers", "open questions",
                   "next steps"):
        assert needle in instructions, needle
    assert all(s in fake.calls[0][0][0]["content"] for s in SUMMARY_SECTIONS)


async def test_a_masked_output_over_the_reading_budget_is_listed_by_its_spill() -> None:
    """An old 4k-token output masked away: the summary reads the newest originals within its
    budget (``proxy.context.stages.reading``), and this one's placeholder, spill id and all,
    is listed after the summary, so its line stays readable from the spill."""
    counter = TokenCounter()
    msgs = conversation(turns=30, size=300)
    msgs += conversation(turns=10, size=1_000)[3:]
    needle = "DEPLOY KEY ROTATED: the staging token is tok_4471, expires 2031-02-03"
    msgs[4]["content"] = words(2_000, 1) + "\n" + needle + "\n" + words(2_000, 2)
    moving = replace(Policy(), masking=replace(Policy().masking, in_steps=False))
    rewrite = plan_request(msgs, Scope(moving, 8_500, counter, MODEL))
    assert needle not in json.dumps(rewrite.mask.messages)  # masking replaced it
    assert rewrite.compaction is not None and 4 in rewrite.compaction.summarize
    res, fake = await run(rewrite.mask.messages, 8_500, originals=msgs,
                          plan=rewrite.compaction, counter=counter)
    assert res.status == "compacted" and needle not in fake.inputs
    listed = res.summary.split(UNREAD_HEADING)[1]
    assert rewrite.mask.messages[4]["content"] in listed


async def test_rolling_summary_is_input_to_the_next_compaction() -> None:
    counter = TokenCounter()
    msgs = conversation(turns=20)
    first, _ = await run(msgs, 8_000, counter=counter,
                         fake=FakeSummarizer("FIRST SUMMARY: chose sqlite for the cache."))
    assert first.status == "compacted"
    grown = first.messages + conversation(turns=20)[3:]
    second, fake = await run(grown, 8_000, counter=counter)
    assert second.status == "compacted"
    # On the cached prefix the earlier summary is the summary message the list holds.
    assert any(is_summary(m) and "FIRST SUMMARY: chose sqlite for the cache." in m["content"]
               for m in fake.calls[0][0])
    summaries = [m for m in second.messages if is_summary(m)]
    assert len(summaries) == 1 and "FIRST SUMMARY" not in summaries[0]["content"]
    # From a transcript (the covered range does not fit the summary window) it is rendered as
    # the earlier summary.
    pieces, fake = await run(grown, 8_000, counter=counter, summary_window=2_500)
    assert pieces.status == "compacted" and len(fake.calls) > 1
    assert "FIRST SUMMARY: chose sqlite for the cache." in fake.inputs
    assert "EARLIER SUMMARY" in fake.inputs


async def test_summary_in_user_role_is_not_the_first_user_message() -> None:
    msgs = [system(), summary_message("old facts"), user("The real task."), *conversation()[3:]]
    plan = plan_compaction(msgs, Scope(Policy(), 8_000, TokenCounter(), MODEL))
    assert plan is not None
    assert 2 in plan.preserved and 1 in plan.summarize


# --- preservation ------------------------------------------------------------------------------


async def test_preserved_messages_survive_byte_identical() -> None:
    pol = policy(protected=(ProtectedRule(marker="<memory>"), ProtectedRule(name="notes")))
    msgs = conversation(turns=10)
    msgs.insert(6, user("<memory>prefers tabs</memory>"))
    msgs.insert(9, {"role": "user", "name": "notes", "content": "recent notes"})
    msgs += tool_turn("write_todos", "old plan")  # an older pinned call: summarized
    old_plan = len(msgs) - 2
    msgs += conversation(turns=8)[3:]
    msgs += tool_turn("write_todos", "1. parse 2. render")
    newest_plan = msgs[-2:]
    msgs += conversation(turns=12)[3:]
    res, _ = await run(msgs, 6_000, pol)
    assert res.status in ("compacted", "insufficient") and res.rewritten
    out = [json.dumps(m) for m in res.messages]
    for m in [msgs[0], msgs[1], msgs[2], msgs[6], msgs[9], *newest_plan]:
        assert json.dumps(m) in out
    assert json.dumps(msgs[old_plan]) not in out
    assert ordering_problems(res.messages) == []


async def test_parallel_calls_are_never_split() -> None:
    counter = TokenCounter()
    msgs = [system(), user("go")]
    for t in range(12):
        msgs += parallel_turn({f"a{t}": words(300, t), f"b{t}": words(300, t + 50),
                               f"c{t}": words(300, t + 99)})
    pol = policy(keep_ratio=0.15)
    for window in range(4_000, 9_000, 250):
        plan = plan_compaction(msgs, Scope(pol, window, counter, MODEL), force=True)
        assert plan is not None and msgs[plan.cut]["role"] == "assistant"
        res, _ = await run(msgs, window, pol, plan=plan, counter=counter)
        assert ordering_problems(res.messages) == []


async def test_single_task_session_compacts() -> None:
    msgs = agent_session(turns=300, output_tokens=150)
    res, fake = await run(msgs, 40_000, summary_window=128_000)
    assert res.status == "compacted" and len(fake.calls) == 1
    assert res.messages[:2] == msgs[:2] and is_summary(res.messages[2])
    assert ordering_problems(res.messages) == []
    assert res.tokens_after < 0.8 * 40_000


async def test_last_user_turn_kept_whole_when_there_is_room() -> None:
    msgs = conversation(turns=30)
    msgs.append(user("Now write the docs."))
    last = len(msgs) - 1
    msgs += tool_turn("read_file", words(600, 3)) + tool_turn("read_file", words(600, 4))
    plan = plan_compaction(msgs, Scope(Policy(), 12_000, TokenCounter(), MODEL))
    assert plan is not None and plan.keep_start > last and plan.cut == last


async def test_last_user_message_kept_when_its_turn_is_too_big() -> None:
    msgs = conversation(turns=10)
    msgs.append(user("Now migrate every module."))
    last = len(msgs) - 1
    for t in range(60):
        msgs += tool_turn("edit", words(200, t))
    plan = plan_compaction(msgs, Scope(Policy(), 15_000, TokenCounter(), MODEL))
    assert plan is not None and plan.cut > last and last in plan.preserved
    res, _ = await run(msgs, 15_000, plan=plan)
    assert msgs[last] in res.messages and res.status == "compacted"


# --- outcomes ----------------------------------------------------------------------------------


async def test_not_triggered_disabled_and_forced() -> None:
    msgs = conversation(turns=5)
    res, fake = await run(msgs, 5_000)
    assert res.status == "none" and res.messages == msgs and not fake.calls
    assert plan_compaction(msgs, Scope(policy(enabled=False), 1_000, TokenCounter(), MODEL)) is None
    forced, fake = await run(msgs, 5_000, force=True)
    assert forced.status == "compacted" and fake.calls and forced.plan.forced


async def test_nothing_to_summarize_is_insufficient_without_a_call() -> None:
    msgs = [system(words(5_000)), user("go"), assistant("ok")]
    res, fake = await run(msgs, 4_000)
    assert res.status == "insufficient" and res.messages == msgs and not fake.calls
    only_summary = [system(), summary_message("x"), user(words(3000)), assistant("ok")]
    res, fake = await run(only_summary, 2_000)
    assert res.status == "insufficient" and not fake.calls


async def test_still_over_trigger_is_insufficient_but_rewritten() -> None:
    msgs = [system(words(4_800)), *conversation(turns=20)[1:]]
    res, _ = await run(msgs, 5_000)
    assert res.status == "insufficient" and res.rewritten
    assert res.tokens_after < res.tokens_before


async def test_summary_that_does_not_shrink_is_not_used() -> None:
    msgs = conversation(turns=10, size=5)
    res, fake = await run(msgs, 2_000, force=True, fake=FakeSummarizer(words(3_000)))
    assert fake.calls and res.status == "insufficient" and not res.rewritten
    assert res.messages == msgs


@pytest.mark.parametrize("reply", ["", "   \n\t"])
async def test_empty_summary_fails(reply: str) -> None:
    with pytest.raises(SummaryFailed):
        await run(conversation(), 8_000, fake=FakeSummarizer(reply))


async def test_input_is_not_mutated() -> None:
    msgs = conversation()
    frozen = copy.deepcopy(msgs)
    await run(msgs, 8_000)
    assert msgs == frozen


# --- big inputs: pieces and merging ------------------------------------------------------------


async def test_oversized_input_is_summarized_in_pieces_within_the_window() -> None:
    counter = TokenCounter()
    msgs = agent_session(turns=40, output_tokens=1_500)
    msgs[5]["content"] = words(9_000, 9) + " NEEDLE-IN-A-HUGE-OUTPUT"  # one message > window
    summary_window = 4_000
    res, fake = await run(msgs, 200_000, force=True, summary_window=summary_window,
                          counter=counter)
    assert res.status == "compacted" and len(fake.calls) > 3
    for prompt, max_tokens in fake.calls:
        assert counter.count_messages(prompt, MODEL) + max_tokens <= summary_window
    assert "NEEDLE-IN-A-HUGE-OUTPUT" in fake.inputs
    assert any("Merge them" in prompt_text(p) for p, _ in fake.calls)
    assert any("(continued)" in prompt_text(p) for p, _ in fake.calls)


async def test_tiny_summary_window_fails_cleanly() -> None:
    with pytest.raises(SummaryFailed):
        await run(conversation(), 8_000, summary_window=200)


# --- reuse -------------------------------------------------------------------------------------


async def test_apply_summary_on_a_grown_list() -> None:
    msgs = conversation()
    res, _ = await run(msgs, 8_000)
    assert res.plan is not None and res.summary is not None
    new_turn = [user("and one more thing"), assistant("sure")]
    again = apply_summary(msgs + new_turn, res.plan, res.summary, Policy())
    assert again == res.messages + new_turn
    assert again[len(res.plan.preserved)]["content"].startswith(SUMMARY_OPEN)
    with pytest.raises(ValueError):
        apply_summary(msgs[:3], res.plan, res.summary, Policy())


async def test_summary_role_follows_policy() -> None:
    for role in ("user", "assistant", "system", "developer"):
        res, _ = await run(conversation(), 8_000, policy(summary_role=role))
        summaries = [m for m in res.messages if is_summary(m)]
        assert [m["role"] for m in summaries] == [role]
        assert ordering_problems(res.messages) == []


async def test_summarizer_errors_propagate_and_stop_the_other_pieces() -> None:
    started: list[int] = []

    async def flaky(prompt: list[dict[str, Any]], max_tokens: int) -> str:
        started.append(len(started))
        if len(started) == 2:
            raise TimeoutError("upstream timed out")
        await asyncio.sleep(0.05)
        return "partial"

    msgs = agent_session(turns=40, output_tokens=1_500)
    with pytest.raises(TimeoutError):
        await compact_list(msgs, None, Policy(), 200_000, TokenCounter(), MODEL, flaky, 4_000,
                           force=True)
    assert len(started) < 10  # of about 25 pieces: the ones not yet started were cancelled


def test_newest_tool_group_is_kept_even_when_larger_than_the_keep_window() -> None:
    counter = TokenCounter()
    msgs = [system(), user("One long task.")]
    for t in range(12):
        msgs += tool_turn("read_file", words(1500, t), {"path": f"f{t}"})
    # keep window 0.10 × 8,000 = 800 tokens: smaller than the newest 1,500-token result.
    plan = plan_compaction(msgs, Scope(policy(), 8_000, counter, MODEL))
    assert plan is not None
    assert plan.cut == len(msgs) - 2  # the newest assistant call and its result stay
    assert msgs[plan.cut].get("tool_calls")


def test_a_plan_made_ahead_follows_the_keep_window_alone() -> None:
    counter = TokenCounter()
    msgs = [system(), user("One long task.")]
    for t in range(12):
        msgs += tool_turn("read_file", words(1500, t), {"path": f"f{t}"})
    # Applied to a later request, whose newer messages stay verbatim after the cut: an empty
    # keep window covers the whole list, a smaller one than the newest group covers it too.
    for keep in (0.0, 0.10):
        ahead = plan_compaction(msgs, Scope(policy(keep_ratio=keep), 8_000, counter, MODEL),
                                ahead=True, lasting=False)
        assert ahead is not None and ahead.cut == len(msgs)
        assert ahead.preserved == (0, 1) and ahead.summarize == tuple(range(2, len(msgs)))
    # A keep window that holds the newest group: the cut is the same as at the trigger.
    wide = Scope(policy(keep_ratio=0.25), 8_000, counter, MODEL)
    ahead = plan_compaction(msgs, wide, ahead=True, lasting=False)
    now = plan_compaction(msgs, wide, lasting=False)
    assert ahead is not None and now is not None and ahead.cut == now.cut < len(msgs)
