"""The ledger's prices: litellm's map once it is read, the policy's own entry over it, the same
figures on every call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from proxy.context.accounting.ledger import Ledger
from proxy.context.accounting.money import Prices
from proxy.context.records.compactions import Records
from proxy.metrics import Metrics
from proxy.policy.model import build_policy, validate_layer
from proxy.store import Store

MAP: dict[str, Any] = {"m": {"input_cost_per_token": 2e-6, "cache_read_input_token_cost": 1e-6,
                             "cache_creation_input_token_cost": 3e-6,
                             "output_cost_per_token": 8e-6}}


def test_prices_follow_the_map_once_read_and_each_policys_own_entry(
        new_store: Callable[[str], Store]) -> None:
    ledger = Ledger(Records(new_store("l.db")), Metrics(), cost_map=lambda: MAP)
    plain = build_policy(validate_layer({}))
    own = build_policy(validate_layer({"models": {"m": {"input_per_mtok": 5}}}))
    assert ledger.prices("m", plain) == Prices()  # the map is not read yet: nothing known
    asyncio.run(ledger.ready())
    from_map = Prices(2e-6, 1e-6, 3e-6, 8e-6)
    assert ledger.prices("m", plain) == from_map
    assert ledger.prices("m", own) == Prices(5e-6, 1e-6, 3e-6, 8e-6)
    assert ledger.prices("m", plain) == from_map  # each policy's entry keeps its own figures
    assert ledger.prices("other", plain) == Prices()
