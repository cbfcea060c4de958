"""The stages on a model that binds reasoning to its history (``Scope.bound``): masking leaves
its steps to compaction, and a compaction leaves nothing made before it after its summary."""

from __future__ import annotations

from typing import Any

import pytest
from factories import FakeSummarizer, agent_session, compact_list, developer, words

from proxy.context.stages.plan import plan
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import is_summary
from proxy.context.stages.summary import CARRIED_HEADING
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import CompactionPolicy, MaskingPolicy, Policy

MODEL = "gpt-4o"
WINDOW = 16_000
COUNTER = TokenCounter()


# The seed's steps: a step whenever it frees enough, however near compaction is.
STEPS = Policy(masking=MaskingPolicy(priced=False))


def scope(bound: bool, policy: Policy = STEPS) -> Scope:
    return Scope(policy, WINDOW, COUNTER, MODEL, bound=bound)


def over_the_mask_trigger() -> list[dict[str, Any]]:
    """Between masking's trigger (0.55) and compaction's (0.80): masking would step."""
    msgs = agent_session(20, 500)
    assert 0.55 * WINDOW < scope(False).count(msgs) < 0.8 * WINDOW
    return msgs


def test_masking_waits_for_compaction_on_a_bound_model() -> None:
    msgs = over_the_mask_trigger()
    assert plan(msgs, scope(False)).mask.masked  # the seed's step, where nothing binds
    bound = plan(msgs, scope(True))
    assert not bound.mask.masked and not bound.changed


def test_masking_still_steps_on_a_bound_model_when_compaction_is_off() -> None:
    off = Policy(masking=STEPS.masking, compaction=CompactionPolicy(enabled=False))
    msgs = over_the_mask_trigger()
    assert plan(msgs, scope(True, off)).mask.masked


def test_a_bound_compaction_covers_the_whole_list() -> None:
    msgs = agent_session(30, 500)[:-1]  # ends with a tool result: the agent's loop goes on
    p = plan(msgs, scope(True))
    assert p.action == "summarize" and p.covered == len(msgs)
    assert p.compaction is not None
    carried = p.compaction.carried
    assert carried and carried[-1] == len(msgs) - 1
    assert list(carried) == list(range(carried[0], len(msgs)))  # the newest, in order
    roles = {msgs[i]["role"] for i in p.compaction.preserved}
    assert roles <= {"system", "user"}  # no assistant turn or result before the summary
    normal = plan(msgs, scope(False))
    assert normal.covered < len(msgs)


async def test_the_summary_message_carries_the_newest_messages_verbatim() -> None:
    msgs = agent_session(30, 500)[:-1]
    msgs[-1]["content"] = "NEWEST-OUTPUT " + words(300, 99)
    p = plan(msgs, scope(True))
    assert p.compaction is not None
    done = await compact_list(msgs, None, Policy(), WINDOW, COUNTER, MODEL, FakeSummarizer(),
                              plan=p.compaction)
    last = done.messages[-1]
    assert is_summary(last) and last["role"] == "user"
    assert CARRIED_HEADING in last["content"] and msgs[-1]["content"] in last["content"]
    assert not any(m["role"] in ("assistant", "tool") for m in done.messages)
    assert done.tokens_after <= p.compaction.trigger_tokens


@pytest.mark.parametrize("at", [-3, -6])
def test_a_developer_message_in_the_keep_window_stays_a_message(at: int) -> None:
    msgs = agent_session(30, 500)[:-1]
    msgs.insert(len(msgs) + at + 1, developer("Tools changed: the shell is now bash."))
    p = plan(msgs, scope(True))
    assert p.compaction is not None
    kept = [msgs[i] for i in p.compaction.preserved]
    assert any(m["role"] == "developer" for m in kept)
    assert all(msgs[i]["role"] != "developer" for i in p.compaction.carried)


def test_a_carried_window_too_large_for_the_trigger_is_summarized_instead() -> None:
    msgs = agent_session(8, 500)
    msgs[-2]["content"] = words(int(0.72 * WINDOW), 7)  # one huge newest result
    msgs = msgs[:-1]
    p = plan(msgs, scope(True))
    assert p.compaction is not None and p.covered == len(msgs)
    assert len(msgs) - 1 not in p.compaction.carried
    assert len(msgs) - 1 in p.compaction.summarize
