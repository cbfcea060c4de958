"""Pricing: prices from the policy's models table over litellm's cost map, a call's cost, and
what the client's own request would have cost without the proxy."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from proxy.context.accounting.money import (
    REDO_TOKENS,
    Baseline,
    Money,
    Prices,
    cost,
    estimate,
    prices,
    without_proxy,
)
from proxy.policy.model import FIELDS, ModelPrices, PolicyError, build_policy, validate_layer
from proxy.upstream.model_map import model_map
from proxy.upstream.usage import UpstreamUsage

MAP = {"m": {"input_cost_per_token": 2e-6, "cache_read_input_token_cost": 1e-6,
             "cache_creation_input_token_cost": 3e-6, "output_cost_per_token": 8e-6},
       "bare": {"input_cost_per_token": 4e-6}}


def test_the_policy_wins_price_by_price_over_the_cost_map() -> None:
    assert prices("m", {}, MAP) == Prices(2e-6, 1e-6, 3e-6, 8e-6)
    own = {"m": ModelPrices(input_per_mtok=5.0, write_per_mtok=6.25)}
    assert astuple(prices("m", own, MAP)) == pytest.approx((5e-6, 1e-6, 6.25e-6, 8e-6))
    assert prices("openai/m", {}, MAP) == prices("m", {}, MAP)  # a provider prefix


def test_missing_cache_prices_default_to_input_and_a_quarter_more() -> None:
    assert astuple(prices("bare", {}, MAP)) == pytest.approx((4e-6, 4e-6, 5e-6, 0.0))
    assert prices("unknown", {}, MAP) == Prices()


def test_litellms_own_map_prices_known_models() -> None:
    p = prices("claude-sonnet-4-5", {}, model_map())
    assert p.input > 0 and p.cached < p.input < p.written and p.output > p.input


def test_a_call_costs_each_kind_of_token_at_its_price() -> None:
    p = Prices(input=1.0, cached=0.1, written=1.25, output=4.0)
    # 1000 prompt tokens: 600 read, 300 written, 100 neither; 10 output tokens.
    assert cost(UpstreamUsage(1000, 600, 300, 10), p) == pytest.approx(100 + 60 + 375 + 40)
    assert cost(UpstreamUsage(), p) == 0


def test_the_client_request_is_priced_from_its_own_previous_request() -> None:
    # Masked: 5000 tokens of the client's 8000 were sent; the upstream counted 5100.
    used = UpstreamUsage(5100, 2048, 3000, 20)
    mine = without_proxy(used, 8000, 5000, False, Baseline(7000, False))
    assert mine == UpstreamUsage(8160, 7000, 1160, 20)
    # The client's first request reads nothing from cache and writes it all.
    assert without_proxy(used, 8000, 5000, False, None) == UpstreamUsage(8160, 0, 8160, 20)
    # A provider that reports no writes is not charged for them.
    plain = UpstreamUsage(5100, 2048, 0, 20)
    assert without_proxy(plain, 8000, 5000, False, Baseline(7000, False)) == \
        UpstreamUsage(8160, 7000, 0, 20)
    # A provider that caches nothing of this conversation serves the client nothing either.
    cold = UpstreamUsage(5100, 0, 0, 20)
    assert without_proxy(cold, 8000, 5000, False, Baseline(7000, False)).cached == 0


def test_lost_reasoning_is_priced_as_its_redo() -> None:
    """The client's own request, which only appends, would not have made the model redo the
    reasoning the provider dropped or a compaction carried away: its output is less by
    ``REDO_TOKENS`` per lost item (never below nothing)."""
    used = UpstreamUsage(5100, 2048, 3000, 900)
    mine = without_proxy(used, 8000, 5000, False, Baseline(7000, False), lost=2)
    assert mine.output == 900 - 2 * REDO_TOKENS
    assert without_proxy(used, 5000, 5000, True, None, lost=9).output == 0
    p = Prices(input=1.0, cached=0.1, written=1.25, output=4.0)
    assert cost(used, p) - cost(without_proxy(used, 5000, 5000, True, None, lost=1), p) == \
        pytest.approx(4.0 * REDO_TOKENS)


def test_requests_sent_as_the_client_sent_them_save_nothing() -> None:
    used = UpstreamUsage(4000, 2944, 1000, 9)
    assert without_proxy(used, 3950, 3950, True, Baseline(3000, True)) == used
    assert without_proxy(used, 3950, 3950, True, None) == used
    # After a rewritten request the cache held the proxy's prefix, not the client's.
    assert without_proxy(used, 3950, 3950, True, Baseline(3900, False)) == \
        UpstreamUsage(4000, 3900, 100, 9)


def test_the_prompt_side_estimate() -> None:
    p = Prices(input=1.0, cached=0.1, written=1.25, output=4.0)
    got = estimate(8000, 5000, 4000, False, Baseline(7000, False, True), p, True)
    assert astuple(got) == pytest.approx((4000 * 0.1 + 1000 * 1.25, 7000 * 0.1 + 1000 * 1.25))
    same = estimate(3000, 3000, 2000, True, Baseline(2000, True), p, False)
    assert same.spent == same.without == pytest.approx(2000 * 0.1 + 1000)


def test_money_headers_are_micro_dollars() -> None:
    assert Money(0.0123456, 0.01).headers() == {"X-Context-Cost-Spent": "12346",
                                                 "X-Context-Cost-Saved": "-2346"}


def test_the_models_table_takes_windows_and_prices() -> None:
    check = FIELDS["models"].check
    table = check("models", {"a": 1000, "b": {"context_window": 2000},
                             "c": {"window": 3000, "input_per_mtok": 3, "cached_per_mtok": 0.3},
                             "d": {"write_per_mtok": 3.75}})
    assert table == {"a": 1000, "b": 2000,
                     "c": {"context_window": 3000, "input_per_mtok": 3.0,
                           "cached_per_mtok": 0.3}, "d": {"write_per_mtok": 3.75}}
    policy = build_policy(validate_layer({"models": table}))
    assert policy.models == {"a": 1000, "b": 2000, "c": 3000}
    assert policy.prices == {"c": ModelPrices(3.0, 0.3), "d": ModelPrices(write_per_mtok=3.75)}
    for bad in ({"a": {"input_per_mtok": -1}}, {"a": {"input_per_mtok": "3"}},
                {"a": {"price": 3}}, {"a": {}}, {"a": {"input_per_mtok": True}}):
        with pytest.raises(PolicyError):
            check("models", bad)
