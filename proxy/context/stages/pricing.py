"""When a masking step pays for itself (SPEC section 4), as pure arithmetic at the model's prices.

``proxy.context.stages.mask`` weighs each step it could take with ``pays``: a step rewrites the
prefix the provider has cached after its first change, and what it frees saves reads until the
next rewrite. The formulas and a worked example: docs/configuration.md, "When a masking step
pays".
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from proxy.context.stages.compact import (
    fixed_tokens,
    keep_window_start,
    lasting_trigger,
    summary_budget,
)
from proxy.context.stages.scope import Scope, StepPrices
from proxy.context.stages.shared import is_summary


class CompactionPoint:
    """Where a compaction of a list would run: over ``lasting_trigger`` of its fixed part, what
    masking weighs a step against (``tokens`` aligns with ``messages``). The fixed part takes a
    pass over the list, made once, when a step is first weighed."""

    def __init__(self, messages: Sequence[Mapping[str, Any]], scope: Scope,
                 tokens: Sequence[int]) -> None:
        self.messages, self.scope, self.tokens = messages, scope, tokens

    @cached_property
    def fixed(self) -> int:
        return fixed_tokens(self.messages, self.scope, self.tokens)

    @cached_property
    def tokens_at(self) -> int:
        """The tokens over which the list would be compacted (``lasting_trigger``, never under
        the trigger ratio's figure)."""
        return lasting_trigger(self.scope, self.fixed, summary_budget(self.scope))

    @cached_property
    def _summaries(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if is_summary(m)]

    def tokens_after(self, end: int) -> int:
        """About what a compaction of the list's first ``end`` messages (a request point) leaves:
        the fixed part, the summary and the keep window (the newest messages under its budget).
        The summary is the conversation's latest one before ``end`` where there is one (a
        model's summaries are alike in size); before the first, its size is unknown and counts
        as nothing: compaction at its cheapest, so a step is taken only when it beats that.
        Only what was there at ``end`` counts, so a request point's decision comes out the
        same at every later request."""
        budget = self.scope.policy.compaction.keep_ratio * self.scope.compaction_window
        keep = sum(self.tokens[keep_window_start(self.tokens, budget, end):end])
        # Called at every request point a step is weighed at: no copy of the list, a bisect.
        before = bisect_left(self._summaries, end)
        summary = self.tokens[self._summaries[before - 1]] if before else 0
        return self.fixed + summary + keep


@dataclass(frozen=True)
class Step:
    """A masking step weighed at one request point: the list as sent (tokens), what the step
    frees, what it rewrites (the tokens the previous request sent after its first change, less
    the freed ones: cached until now, paid again at the write price) and the session's growth
    per request point (from the list itself, so every replica agrees), ``kept`` of it what no
    step clears (messages, placeholders), and what each later step would write again
    (``rewritten_later``: the list from the first result this step keeps to its end, or what
    the newest ``keep_recent`` results usually weigh, the larger; ``larger``: by how much the
    usual exceeds this step's)."""

    sent: int
    freed: int
    rewritten: int
    growth: float
    kept: float = 0.0
    rewritten_later: int = 0
    end: int = 0  # the messages the request point sent
    larger: int = 0  # how much larger the newest results usually are than those it keeps


def pays(scope: Scope, step: Step, compaction_at: CompactionPoint | None) -> bool:
    """Whether ``step`` pays for itself at the model's prices (``Scope.prices``, in input
    prices: ``read`` a cached token, ``write`` a token written to the cache); the formulas and
    a worked example: docs/configuration.md, "When a masking step pays".

    Both must hold with compaction on: the step pays back its rewrite with the freed tokens'
    reads before compaction would come anyway (``(trigger − sent) / growth`` turns); and the
    way of keeping the list it starts (the list between what the step leaves and masking's
    trigger, ``rewritten_later`` tokens written again at each later step) costs less per turn
    than compaction's (the list between what compaction leaves and its trigger, rewritten and
    summarized once a cycle) in its second cycle too, what no step clears having raised its
    floor. With compaction
    off the step is weighed alone: the freed tokens' reads until the room it makes has filled
    again, against the rewrite.
    """
    prices, g = scope.prices, step.growth
    rewrite = step.rewritten * prices.write - (step.rewritten + step.freed) * prices.read
    if compaction_at is None:
        return step.freed * prices.read * (step.freed / g if g > 0 else math.inf) > rewrite
    turns = max(0.0, compaction_at.tokens_at - step.sent) / g if g > 0 else math.inf
    if step.freed * prices.read * turns <= rewrite:
        return False
    top = scope.policy.masking.trigger_ratio * (scope.window or 0)
    left = step.sent - step.freed
    # After one cycle: what no step clears has grown, and the newest results are as large as
    # they usually are.
    later = left + step.larger + (step.kept * (top - left) / g if g > 0 else 0.0)
    if later >= top:  # masking would hold the list for one cycle only
        return False
    # Masking must still be the cheaper way in its second cycle, from the higher floor (its
    # first costs less): a regime that lasts one cycle only pays a rewrite for nothing.
    masking = masking_rate(prices, later, top, max(step.rewritten_later, 1), g)
    return masking < compaction_rate(prices, compaction_at.tokens_after(step.end),
                                     compaction_at.tokens_at, g)


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
