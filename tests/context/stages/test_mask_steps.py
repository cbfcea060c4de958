"""Masking in steps: the masked set only grows, in steps, replayed from the list itself."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.context.stages.mask import MaskResult, is_placeholder, mask_tool_outputs
from proxy.context.stages.plan import plan, sent_before
from proxy.context.stages.pricing import CompactionPoint
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import first_items
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import MaskingPolicy, Policy
from proxy.testing import agent

MODEL = "gpt-4o"
COUNTER = TokenCounter()
SPEC = agent.AgentSpec(seed=3, output_tokens=(300, 1200), thought_words=(5, 20), memory=None)


def policy(**masking: Any) -> Policy:
    return replace(Policy(), masking=MaskingPolicy(**masking))


def turns(spec: agent.AgentSpec, n: int) -> list[list[dict[str, Any]]]:
    """The client's message list at each of ``n`` requests of a growing session."""
    msgs = agent.opening_messages(spec)
    out = []
    for assistant, results in agent.turns(spec, n):
        out.append(list(msgs))
        msgs = [*msgs, assistant, *results]
    out.append(msgs)
    return out


def dumps(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


def masked_ids(res: MaskResult) -> set[str]:
    return {s.id for s in res.masked}


def play(pol: Policy, window: int, n: int, spec: agent.AgentSpec = SPEC
         ) -> list[tuple[list[dict[str, Any]], MaskResult]]:
    return [(msgs, mask_tool_outputs(msgs, Scope(pol, window, COUNTER, MODEL)))
            for msgs in turns(spec, n)]


def test_between_steps_every_earlier_message_is_sent_byte_identical() -> None:
    played = play(Policy(), 40_000, 120)
    steps = 0
    for (_, before), (_, now) in itertools.pairwise(played):
        head = now.messages[:len(before.messages)]
        if now.first_change is None:
            assert dumps(head) == dumps(before.messages)
        else:
            steps += 1
            assert dumps(head[:now.first_change]) == dumps(before.messages[:now.first_change])
        assert masked_ids(before) <= masked_ids(now)  # the masked set only grows
    assert 2 <= steps <= 10


def test_a_step_clears_everything_older_than_the_newest_keep_recent() -> None:
    for msgs, res in play(Policy(), 40_000, 120):
        if res.first_change is None:
            continue
        results = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
        maskable = [i for i in results[:-5] if msgs[i]["content"] != "plan updated"]
        assert [s.index for s in res.masked] == maskable
        assert all(res.messages[i] == msgs[i] for i in results[-5:])
        assert all(is_placeholder(res.messages[i]["content"]) for i in maskable)


def test_a_step_comes_only_when_the_transcript_as_sent_crosses_the_trigger() -> None:
    window = 40_000
    played = play(Policy(), window, 120)
    for (_, before), (_, now) in itertools.pairwise(played):
        # What this request would send with the masking so far (the previous request's).
        as_sent = now.tokens_before - (before.tokens_before - before.tokens_after)
        if now.first_change is not None:
            assert as_sent > 0.55 * window
        elif as_sent > 0.55 * window:  # over the trigger without a step: it would free little
            assert now.tokens_after == as_sent


def test_with_in_steps_off_the_boundary_moves_every_turn() -> None:
    moving = play(policy(in_steps=False), 40_000, 120)
    stepping = play(Policy(), 40_000, 120)
    changed_moving = sum(1 for _, r in moving if r.first_change is not None)
    changed_steps = sum(1 for _, r in stepping if r.first_change is not None)
    assert changed_moving > 3 * changed_steps
    assert sum(r.tokens_after for _, r in moving) < sum(r.tokens_after for _, r in stepping)


def test_prefix_kept_counts_what_the_previous_request_sent_the_same() -> None:
    scope = Scope(Policy(), 12_000, COUNTER, MODEL, agent.TOOLS)
    previous: list[dict[str, Any]] | None = None
    for msgs in turns(SPEC, 40):
        p = plan(msgs, scope)
        sent = p.mask.messages
        if previous is None:
            assert p.kept == 0
        else:
            n = 0
            while n < len(previous) and sent[n] == previous[n]:
                n += 1
            assert p.kept == COUNTER.tools_tokens(agent.TOOLS, MODEL) + \
                sum(p.mask.message_tokens[:n])
        previous = sent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), low=st.integers(50, 800), spread=st.integers(0, 1500),
       keep=st.integers(0, 6), trigger=st.sampled_from([0.3, 0.45, 0.55, 0.7]),
       free=st.sampled_from([0.0, 0.02, 0.05, 0.1]), n=st.integers(5, 45))
def test_steps_property(seed: int, low: int, spread: int, keep: int, trigger: float,
                        free: float, n: int) -> None:
    """For any session: the masked set only grows; between steps the sent prefix is
    byte-identical; the newest keep_recent results are always verbatim; and the list a request
    gets depends on nothing but that request (so a fresh replica masks the same)."""
    spec = replace(SPEC, seed=seed, output_tokens=(low, low + spread))
    pol = policy(keep_recent=keep, trigger_ratio=trigger, min_free_ratio=free)
    played = play(pol, 10_000, n, spec)
    for (_, before), (msgs, now) in itertools.pairwise(played):
        assert masked_ids(before) <= masked_ids(now)
        head = now.messages[:len(before.messages)]
        end = len(before.messages) if now.first_change is None else now.first_change
        assert dumps(head[:end]) == dumps(before.messages[:end])
        results = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
        # Masking stands alone here (no compaction point): where the list would pass
        # compaction's trigger the older of the newest results yield, never the newest group's.
        group = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        newest = results[len(results) - keep:] if keep else []
        assert all(now.messages[i] == msgs[i] or i < group for i in newest)
    last_msgs, last = played[-1]
    again = mask_tool_outputs(json.loads(json.dumps(last_msgs)),
                              Scope(pol, 10_000, TokenCounter(), MODEL))
    assert dumps(again.messages) == dumps(last.messages)


def test_sent_before_is_what_the_previous_request_sent() -> None:
    # The list a summary call rides: on a turn whose masking stepped, the start as the previous
    # request point masked it, not as this one does (steps whatever compaction would do).
    scope = Scope(policy(priced=False), 24_000, COUNTER, MODEL)
    stepped = 0
    requests = turns(SPEC, 40)
    for before, now in itertools.pairwise(requests):
        p = plan(now, scope)
        riding = sent_before(p, scope)
        assert len(riding) == len(p.mask.messages)
        if p.rewrote:
            stepped += 1
            assert riding[:p.previous] == plan(before, scope).mask.messages[:p.previous]
            assert riding[:p.previous] != p.mask.messages[:p.previous]
        else:
            assert riding is p.mask.messages
    assert stepped >= 2


def test_a_step_waits_where_it_does_not_pay() -> None:
    """32k, 1-4k-token outputs: the newest 5 results fill most of the trigger budget, so a
    step would free little for a turn or two before compaction. By default (priced) masking
    waits; with the price test off the seed's steps come nearly every turn."""
    spec = agent.AgentSpec(seed=11, output_tokens=(1000, 4000), thought_words=(10, 40))
    counter = TokenCounter()
    stepped = {True: 0, False: 0}
    for default in (True, False):
        policy = Policy() if default else replace(
            Policy(), masking=MaskingPolicy(priced=False))
        for turns in range(4, 12):
            msgs = agent.conversation(spec, turns)
            scope = Scope(policy, 32_000, counter, "gpt-4o", tools=agent.TOOLS)
            at = CompactionPoint(msgs, scope, first_items(counter.token_pairs(msgs, "gpt-4o")))
            res = mask_tool_outputs(msgs, scope, compaction_at=at)  # compaction will come
            stepped[default] += bool(res.masked)
    assert stepped[True] == 0 < stepped[False]


def test_with_compaction_off_a_step_comes_before_the_list_passes_compaction_s_trigger() -> None:
    """Never over the window while masking could prevent it: where compaction will not do the
    work, a step is taken once the list as sent, grown by a turn, would pass compaction's
    trigger, whether or not it pays."""
    spec = agent.AgentSpec(seed=11, output_tokens=(1000, 4000), thought_words=(10, 40))
    counter = TokenCounter()
    policy = Policy()  # priced: with compaction coming, no step here pays
    scope = Scope(policy, 32_000, counter, "gpt-4o", tools=agent.TOOLS)
    off = scope.policy.compaction.trigger_ratio * 32_000
    for turns in range(4, 14):
        msgs = agent.conversation(spec, turns)
        sent = counter.count_messages(msgs, "gpt-4o", agent.TOOLS)
        at = CompactionPoint(msgs, scope, first_items(counter.token_pairs(msgs, "gpt-4o")))
        with_compaction = mask_tool_outputs(msgs, scope, compaction_at=at)
        without = mask_tool_outputs(msgs, scope)  # compaction off: no compaction point
        if sent <= 32_000:  # a list over the window steps whatever comes
            assert not with_compaction.masked  # compaction will do the work: no step pays
        if sent > off:
            assert without.masked and without.tokens_after < sent, turns


def test_priced_steps_replay_the_same_at_every_later_request() -> None:
    """Masking weighs a past request point by what the list held then (compaction's keep window
    and summary included), so a later request never masks anew at an earlier point: the
    masked set only grows and the prefix up to a step's first change is sent unchanged."""
    spec = agent.AgentSpec(seed=12, output_tokens=(4000, 16000), thought_words=(10, 40))
    scope = Scope(Policy(), 200_000, COUNTER, MODEL, agent.TOOLS)
    plans = [plan(msgs, scope) for msgs in turns(spec, 24)]
    for before, now in itertools.pairwise(plans):
        assert masked_ids(before.mask) <= masked_ids(now.mask)
        # The previous request point, replayed now, is what that request sent.
        replayed = sent_before(now, scope)[:now.previous]
        assert dumps(replayed) == dumps(before.mask.messages[:now.previous])
