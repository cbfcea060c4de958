"""When a masking step pays for itself (SPEC section 4), as pure arithmetic at the model's prices.

``proxy.context.stages.mask`` weighs each step it could take with ``pays``: a step rewrites the
prefix the provider has cached after its first change, and what it frees saves reads until the
next rewrite. The formulas and a worked example: docs/configuration.md, "When a masking step
pays".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from proxy.context.stages.compact import CompactionPoint
from proxy.context.stages.scope import Scope, StepPrices


@dataclass(frozen=True)
class Step:
    """A masking step weighed at one request point: the list as sent (tokens), what the step
    frees, what it rewrites (the tokens the previous request sent after its first change, less
    the freed ones: cached until now, paid again at the write price) and the session's growth
    per request point (from the list itself, so every replica agrees)."""

    sent: int
    freed: int
    rewritten: int
    growth: float


def pays(scope: Scope, step: Step, compaction_at: CompactionPoint | None) -> bool:
    """Whether ``step`` pays for itself at the model's prices (``Scope.prices``, in input
    prices: ``read`` a cached token, ``write`` a token written to the cache); the formulas and
    a worked example: docs/configuration.md, "When a masking step pays".

    With compaction on, stepping chooses a regime: the list kept between what the step leaves
    and masking's trigger, rewritten (``rewritten`` tokens at the write price) each time it
    refills, against the list compaction keeps between what it leaves and its trigger, rewritten
    and summarized once a cycle. The step is taken when its regime costs less per turn at the
    session's growth. With compaction off the step is weighed alone: the freed tokens' reads on
    the turns until the room it makes has filled again, against the rewrite.
    """
    prices, g = scope.prices, step.growth
    if compaction_at is None:
        turns = step.freed / g if g > 0 else math.inf
        return step.freed * prices.read * turns > \
            step.rewritten * prices.write - (step.rewritten + step.freed) * prices.read
    top = scope.policy.masking.trigger_ratio * (scope.window or 0)
    left = step.sent - step.freed
    if left >= top:  # the step leaves the list over masking's trigger: no regime to keep
        return False
    return masking_rate(prices, left, top, step.rewritten, g) < \
        compaction_rate(prices, compaction_at.tokens_after, compaction_at.tokens_at, g)


def masking_rate(prices: StepPrices, left: float, top: float, rewritten: float,
                 growth: float) -> float:
    """Input-price tokens a turn costs where masking keeps the list: from ``left`` up to
    masking's trigger (``top``, over ``left``), about ``rewritten`` tokens written again at
    each step."""
    return prices.read * (left + top) / 2 + prices.write * rewritten * growth / (top - left)


def compaction_rate(prices: StepPrices, after: float, trigger: float, growth: float) -> float:
    """Input-price tokens a turn costs where compaction keeps the list: from what it leaves
    (``after``) up to its ``trigger``, ``after`` written again and the list read by the summary
    call once a cycle."""
    cycle = prices.write * after + prices.read * trigger
    return prices.read * (after + trigger) / 2 + cycle * growth / max(1.0, trigger - after)
