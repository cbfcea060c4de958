"""The usage correction (SPEC section 3): the upstream's own prompt-token count for a
conversation corrects the estimate for its later turns.

The ratio of the upstream's count to our estimate (bounded to [0.5, 2], in steps of 1%) scales
the triggers and the keep budget, so a tokenizer that counts more than ours compacts earlier.
"""

from __future__ import annotations

from dataclasses import replace

from proxy.context.records.compactions import Records
from proxy.policy.model import Policy

RATIO_BOUNDS = (0.5, 2.0)  # how far the upstream's own count may correct our estimate
_MEMO_LIMIT = 4096


def scaled(policy: Policy, ratio: float) -> Policy:
    """``policy`` with its trigger ratios and keep ratio divided by ``ratio`` (at most 1)."""
    m, c = policy.masking, policy.compaction
    return replace(
        policy,
        masking=replace(m, trigger_ratio=min(1.0, m.trigger_ratio / ratio)),
        compaction=replace(c, trigger_ratio=min(1.0, c.trigger_ratio / ratio),
                           keep_ratio=min(1.0, c.keep_ratio / ratio)))


class UsageCorrection:
    """Per conversation: what the upstream said the last prompt cost against our estimate."""

    def __init__(self, records: Records) -> None:
        self.records = records
        self._scaled: dict[tuple[int, float], tuple[Policy, Policy]] = {}

    def ratio(self, conversation: str) -> float:
        usage = self.records.usage(conversation)
        if usage is None:
            return 1.0
        ratio = min(max(usage.prompt_tokens / usage.estimate, RATIO_BOUNDS[0]), RATIO_BOUNDS[1])
        return round(ratio, 2)  # steps of 1%: finer is noise, and it keeps the memo small

    def corrected(self, conversation: str, policy: Policy) -> tuple[Policy, float]:
        """The policy to plan with, and the ratio that reported figures are scaled by."""
        ratio = self.ratio(conversation)
        if ratio == 1.0:
            return policy, 1.0
        memo = (id(policy), ratio)
        hit = self._scaled.get(memo)
        if hit is None or hit[0] is not policy:  # id() reused by a newer policy object
            if len(self._scaled) > _MEMO_LIMIT:
                self._scaled.clear()
            hit = self._scaled[memo] = (policy, scaled(policy, ratio))
        return hit[1], ratio

    def changed(self, conversation: str, prompt_tokens: int, estimate: int) -> bool:
        """Whether the upstream's count for what we estimated at ``estimate`` tokens is worth
        recording: a change under 1% of the ratio is not (a write per turn buys nothing)."""
        if prompt_tokens <= 0 or estimate <= 0:
            return False
        old = self.records.usage(conversation)
        return old is None or abs(prompt_tokens / estimate -
                                  old.prompt_tokens / old.estimate) >= 0.01

    async def record(self, org: str, conversation: str, prompt_tokens: int,
                     estimate: int) -> None:
        """Remember the upstream's count for what we estimated at ``estimate`` tokens, when it
        ``changed``."""
        if self.changed(conversation, prompt_tokens, estimate):
            await self.records.record_usage(org, conversation, prompt_tokens, estimate)
