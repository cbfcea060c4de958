"""Leases (``proxy.store.leases``): one holder at a time, a dead holder's lease runs out, a
background job runs on one replica per period. On both backends: two ``Store`` objects on one
target stand for two processes."""

from __future__ import annotations

from proxy.store import Store, leases


def test_one_holder_at_a_time_until_it_releases(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    assert a.atomic(leases.claim, "compaction c1 h1", 30, "replica-a")
    assert not b.atomic(leases.claim, "compaction c1 h1", 30, "replica-b")
    assert b.atomic(leases.claim, "compaction c1 h2", 30, "replica-b")  # another prefix
    assert a.atomic(leases.claim, "compaction c1 h1", 30, "replica-a")  # its own: extended
    assert a.atomic(leases.renew, "compaction c1 h1", 30, "replica-a")
    assert not b.atomic(leases.renew, "compaction c1 h1", 30, "replica-b")
    assert leases.held(b, "compaction c1 h1")
    b.atomic(leases.release, "compaction c1 h1", "replica-b")  # not b's: nothing happens
    assert leases.held(b, "compaction c1 h1")
    a.atomic(leases.release, "compaction c1 h1", "replica-a")
    assert not leases.held(b, "compaction c1 h1")
    assert b.atomic(leases.claim, "compaction c1 h1", 30, "replica-b")


def test_a_dead_holders_lease_runs_out_and_can_be_taken(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    assert a.atomic(leases.claim, "compaction c1 h1", 0, "dead-replica")  # already run out
    assert not leases.held(b, "compaction c1 h1")
    assert b.atomic(leases.claim, "compaction c1 h1", 30, "replica-b")
    assert not a.atomic(leases.renew, "compaction c1 h1", 30, "dead-replica")  # it lost it
    assert a.atomic(leases.purge_expired) == 0  # b's is live
    assert a.atomic(leases.claim, "stale", 0, "dead-replica")
    assert a.atomic(leases.purge_expired) == 1


async def test_a_background_job_runs_on_one_replica_per_period(two_stores: tuple[Store, Store]
                                                               ) -> None:
    a, b = two_stores
    assert await leases.run_once(a, "spill-purge", 3600, "replica-a")
    assert not await leases.run_once(b, "spill-purge", 3600, "replica-b")
    assert await leases.run_once(b, "other-job", 3600, "replica-b")  # each job its own lease
    # A period of zero: the lease is over at once, the next tick may be anyone's.
    assert await leases.run_once(a, "short", 0, "replica-a")
    assert await leases.run_once(b, "short", 0, "replica-b")
