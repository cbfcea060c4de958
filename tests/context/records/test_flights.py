"""Single flight across processes (``proxy.context.records.flights``) on the suite's store, two
``Flights`` standing for two replicas: the first claims the prefix's lease, the second finds it
held and waits for the stored compaction; a stored one is returned for reuse; a holder that
gives up frees the waiter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from proxy.context.records.compactions import Records
from proxy.context.records.flights import Flights, lease_name
from proxy.store import Store, leases

CONV, PHASH = "acme:t-1", "ab" * 32


async def test_one_replica_makes_the_summary_and_the_other_waits_for_it(
        store_target: Callable[[str], Path | str]) -> None:
    a, b = Store(store_target("f.db")), Store(store_target("f.db"))
    try:
        ra, rb = Records(a), Records(b)
        mine, theirs = Flights(ra, owner="replica-a"), Flights(rb, owner="replica-b")
        claim = await mine.claim(CONV, PHASH, 12)
        assert (claim.stored, claim.holder, claim.leased) == (None, True, True)
        assert not (await theirs.claim(CONV, PHASH, 12)).holder

        async def make() -> None:
            async with mine.holding(CONV, PHASH):
                await asyncio.sleep(0.1)
                await ra.ensure("acme", CONV)
                await ra.add_compaction("acme", CONV, kind="auto", prefix_hash=PHASH,
                                        covered=12, preserved=(0,), summary="S",
                                        summary_model="m", summary_tokens=5,
                                        tokens_before=900, tokens_after=100,
                                        status="compacted")

        waited, _ = await asyncio.gather(theirs.wait(CONV, PHASH, 12, timeout_s=10), make())
        assert waited is not None and waited.summary == "S"
        assert not leases.held(a, lease_name(CONV, PHASH))  # released once stored
        again = await theirs.claim(CONV, PHASH, 12)
        assert again.stored is not None and not again.holder  # reuse, no summary call
    finally:
        a.close()
        b.close()


async def test_a_holder_that_gives_up_frees_its_waiter(new_store: Callable[[str], Store]
                                                       ) -> None:
    store = new_store("f.db")
    flights = Flights(Records(store), owner="replica-a")
    other = Flights(Records(store), owner="replica-b")
    assert (await flights.claim(CONV, PHASH, 12)).holder

    async def give_up() -> None:
        async with flights.holding(CONV, PHASH):
            await asyncio.sleep(0.1)  # no compaction stored

    waited, _ = await asyncio.gather(other.wait(CONV, PHASH, 12, timeout_s=10), give_up())
    assert waited is None
    assert await other.wait(CONV, "cd" * 32, 12, timeout_s=0) is None  # nobody holds it
    async with flights.holding(CONV, PHASH, leased=False):  # no lease: nothing to keep
        pass
