"""The usage correction (``proxy.context.accounting.correction``) on the suite's store: the
upstream's count over our estimate, bounded and in steps of 1%, scales the triggers and the keep
budget; a change under 1% is not written."""

from __future__ import annotations

from collections.abc import Callable

from proxy.context.accounting.correction import UsageCorrection, scaled
from proxy.context.records.compactions import Records
from proxy.policy.model import Policy
from proxy.store import Store


def test_scaling_divides_the_ratios_and_caps_them_at_one() -> None:
    p = scaled(Policy(), 1.25)
    assert p.masking.trigger_ratio == 0.55 / 1.25 and p.compaction.trigger_ratio == 0.8 / 1.25
    assert p.compaction.keep_ratio == 0.1 / 1.25
    assert scaled(Policy(), 0.5).compaction.trigger_ratio == 1.0


async def test_the_ratio_is_bounded_rounded_and_only_written_when_it_moves(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("u.db")
    records = Records(store)
    correction = UsageCorrection(records)
    conv = "acme:t"
    assert correction.ratio(conv) == 1.0
    policy = Policy()
    assert correction.corrected(conv, policy) == (policy, 1.0)
    await records.ensure("acme", conv)
    await correction.record("acme", conv, 1234, 1000)
    assert correction.ratio(conv) == 1.23
    planned, ratio = correction.corrected(conv, policy)
    assert ratio == 1.23 and planned.compaction.trigger_ratio == 0.8 / 1.23
    assert correction.corrected(conv, policy)[0] is planned  # memoized per policy and ratio
    await correction.record("acme", conv, 1240, 1000)  # under 1%: nothing written
    assert records.usage(conv).prompt_tokens == 1234  # type: ignore[union-attr]
    await correction.record("acme", conv, 9000, 1000)
    assert correction.ratio(conv) == 2.0  # bounded
    await correction.record("acme", conv, 0, 1000)  # nothing to learn from
    assert correction.ratio(conv) == 2.0
