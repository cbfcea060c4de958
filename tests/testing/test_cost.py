"""A session's cost against pass-through (``proxy.testing.cost``): the provider's cache rules
(nothing under 1,024 shared tokens, steps of 128) and a call's cost in uncached-token units."""

from __future__ import annotations

import pytest

from proxy.testing.cost import Call, cacheable, cached_share, cost, passthrough, priced


@pytest.mark.parametrize(("shared", "cached"), [(0, 0), (1023, 0), (1024, 1024), (1151, 1024),
                                                (1152, 1152), (10_000, 9984)])
def test_what_of_a_shared_prefix_is_cached(shared: int, cached: int) -> None:
    assert cacheable(shared) == cached


def test_pass_through_is_cached_up_to_the_previous_prompt() -> None:
    calls = passthrough([900, 2000, 5000, 1500])
    # 2000 shares 900 - 3 (reply priming) with the first: under the minimum; 5000 shares 1997
    # -> 1920; a shorter prompt is cached at most whole: min(1500, 4992). Each writes what it
    # did not read, in whole cache steps, once it is past the minimum: 1920, 4992 - 1920.
    assert calls == [Call(900, 0), Call(2000, 0, written_tokens=1920),
                     Call(5000, 1920, written_tokens=3072), Call(1500, 1500)]
    assert priced(calls, 0.1, 1.25) == pytest.approx(
        900 + (80 + 1.25 * 1920) + (8 + 1.25 * 3072 + 0.1 * 1920) + 0.1 * 1500)


def test_cost_and_cached_share() -> None:
    calls = [Call(1000, 0), Call(3000, 2000, summary=True)]
    assert cost(calls, 0.1) == 1000 + 1000 + 0.1 * 2000
    assert cost(calls, 1.0) == 4000  # caching at full price saves nothing
    assert cached_share(calls) == 0.5
    assert cached_share([]) == 0.0
