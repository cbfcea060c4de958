"""A stage runs when it pays (SPEC sections 4 and 5; the figures: docs/configuration.md):
a masking step waits when compaction is near, a compaction that would not last waits while the
request fits, and a summary on the cached prefix answers shorter rather than leave the cache."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from factories import FakeSummarizer, compact_list, hellos, system, tool_turn, user

from proxy.context.stages.compact import LASTING_CAP, plan_compaction
from proxy.context.stages.plan import plan
from proxy.context.stages.scope import Scope
from proxy.context.stages.summary import PREFIX_INSTRUCTION
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import CompactionPolicy, MaskingPolicy, Policy
from proxy.testing import agent

MODEL = "gpt-4o"
COUNTER = TokenCounter()
Msgs = list[dict[str, Any]]


def session(sizes: list[int], fixed: int = 0) -> Msgs:
    """A system prompt (``fixed`` tokens more), the task, one read_file turn per size."""
    msgs: Msgs = [system("You are a careful coding agent." + hellos(fixed)), user("Port it.")]
    for n, size in enumerate(sizes):
        msgs += tool_turn("read_file", f"{n}:" + hellos(size), {"path": f"m{n}.py"})
    return msgs


def test_a_step_waits_when_compaction_is_near() -> None:
    """32k, 1-4k-token outputs: compaction's trigger (25.6k) is under three turns above
    masking's (17.6k). A step would save its freed tokens' reads for a turn or two and pay
    the rewrite of the prefix after it: it does not pay, and waits for compaction (the seed's
    rule, ``masking.priced: false``, steps), even over the window, which compaction brings
    down; it steps when compaction cannot do the work."""
    spec = agent.AgentSpec(seed=11, output_tokens=(1000, 4000), thought_words=(10, 40))
    policies = {
        "near": Policy(),
        "seed": replace(Policy(), masking=MaskingPolicy(priced=False)),
        "no compaction": replace(Policy(), compaction=CompactionPolicy(enabled=False)),
    }
    stepped = dict.fromkeys(policies, 0)
    over = 0
    for turns in range(4, 14):
        msgs = agent.conversation(spec, turns)
        for name, pol in policies.items():
            scope = Scope(pol, 32_000, COUNTER, MODEL, tools=agent.TOOLS)
            masked = bool(plan(msgs, scope).mask.masked)
            if scope.count(msgs) > 32_000:
                over += name == "near"
                if name == "no compaction":
                    assert masked  # masking must keep it in the window
            else:
                stepped[name] += masked
    assert stepped["near"] == 0 < stepped["seed"] and stepped["no compaction"] > 0 and over


def test_a_compaction_that_would_not_last_waits_while_the_request_fits() -> None:
    """Two 13k-token results over a 32k window's trigger: a compaction would leave the newest
    one and a summary, and the next turn of that size would cross the trigger again, so it
    waits until the request would fill the window; the same tokens in small turns compact."""
    scope = Scope(Policy(), 32_000, COUNTER, MODEL)
    large = session([13_000, 13_000])
    assert 25_600 < scope.count(large) <= LASTING_CAP * 32_000
    assert plan_compaction(large, scope) is None
    fuller = session([13_000, 13_000, 5_000])
    assert scope.count(fuller) > LASTING_CAP * 32_000
    assert plan_compaction(fuller, scope) is not None
    small = session([1_000] * 26)
    assert 25_600 < scope.count(small) <= LASTING_CAP * 32_000
    assert plan_compaction(small, scope) is not None
    assert plan_compaction(large, scope, force=True) is not None  # asked for: it compacts


async def test_a_summary_on_the_cached_prefix_answers_shorter_rather_than_leave_it() -> None:
    """A 15k fixed prompt in a 20k window: the covered range leaves the summary's answer less
    than its max_tokens (3,000) but more than half of it, so the one summary call still rides
    the cached prefix, asking for what fits."""
    pol = replace(Policy(), compaction=CompactionPolicy(summary_ratio=0.15))
    scope = Scope(pol, 20_000, COUNTER, MODEL)
    msgs = session([], fixed=15_000)
    n = 0
    while plan_compaction(msgs, scope) is None:
        msgs += tool_turn("read_file", f"{n}:" + hellos(300), {"path": f"m{n}.py"})
        n += 1
    cplan = plan_compaction(msgs, scope)
    assert cplan is not None
    fake = FakeSummarizer()
    done = await compact_list(msgs, None, pol, 20_000, COUNTER, MODEL, fake)
    assert done.status in ("compacted", "insufficient") and len(fake.calls) == 1
    prompt, max_tokens = fake.calls[0]
    assert prompt[:cplan.cut] == msgs[:cplan.cut]  # the cached prefix, then the instruction
    assert prompt[-1]["content"] == PREFIX_INSTRUCTION
    assert cplan.summary_max_tokens // 2 <= max_tokens < cplan.summary_max_tokens
