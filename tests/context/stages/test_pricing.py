"""When a masking step pays (``proxy.context.stages.pricing``): the two regimes' costs per turn,
the worked examples of docs/configuration.md, and a rule that follows the prices."""

from __future__ import annotations

import pytest

from proxy.context.stages.mask import mask_tool_outputs
from proxy.context.stages.pricing import CompactionPoint, compaction_rate, masking_rate
from proxy.context.stages.scope import Scope, StepPrices
from proxy.context.stages.shared import first_items
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import Policy
from proxy.testing import agent

COUNTER = TokenCounter()
MODEL = "gpt-4o"
DEFAULT = StepPrices()


def test_the_documented_128k_example_steps() -> None:
    masking = masking_rate(DEFAULT, 27_000, 70_400, 10_000, 2_500)
    later = masking_rate(DEFAULT, 35_700, 70_400, 10_000, 2_500)
    compaction = compaction_rate(DEFAULT, 13_800, 102_400, 2_500)
    assert masking == pytest.approx(5_600, abs=50) and later == pytest.approx(6_200, abs=50)
    assert compaction == pytest.approx(6_600, abs=50)
    assert masking < later < compaction


def test_the_documented_32k_example_waits() -> None:
    masking = masking_rate(DEFAULT, 12_700, 17_600, 9_300, 2_600)
    compaction = compaction_rate(DEFAULT, 7_400, 25_600, 2_600)
    assert masking == pytest.approx(7_700, abs=50) and compaction == pytest.approx(3_300, abs=50)
    assert masking > compaction


def test_dearer_writes_weigh_against_a_step() -> None:
    args = (27_000, 70_400, 30_000, 2_500)
    cheap, dear = StepPrices(0.1, 1.0), StepPrices(0.1, 2.0)
    margin = {p: compaction_rate(p, 26_600, 102_400, 2_500) - masking_rate(p, *args)
              for p in (cheap, dear)}
    assert margin[cheap] > margin[dear]


def steps(prices: StepPrices, window: int, turns: int) -> int:
    """Masking steps over a session's requests at ``prices`` (compaction coming)."""
    spec = agent.AgentSpec(seed=5, output_tokens=(1000, 4000), thought_words=(10, 40))
    msgs = agent.conversation(spec, turns)
    scope = Scope(Policy(), window, COUNTER, MODEL, agent.TOOLS, prices=prices)
    at = CompactionPoint(msgs, scope, first_items(COUNTER.token_pairs(msgs, MODEL)))
    res = mask_tool_outputs(msgs, scope, compaction_at=at)
    return len({s.index for s in res.masked})


def test_the_rule_follows_the_prices() -> None:
    """The same session masks at least as much where writes are cheap as where they are dear,
    and a long session at 128k masks where a short one at 32k leaves the work to compaction."""
    cheap, dear = StepPrices(0.1, 1.0), StepPrices(0.1, 4.0)
    assert steps(cheap, 128_000, 45) >= steps(dear, 128_000, 45)
    assert steps(DEFAULT, 128_000, 45) > 0
    assert steps(DEFAULT, 32_000, 9) == 0
