"""Writes the store could not take (``proxy.context.records.deferred``): queued in order while it is
down and written when it answers again; a write that can never succeed is counted as lost
without blocking the rest; what is left at shutdown is counted too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.context.records.deferred import DeferredWrites
from proxy.store import Store, Tx
from proxy.store.health import StoreHealth


def put(tx: Tx, name: str) -> None:
    tx.execute("INSERT INTO meta (name, value) VALUES (?, 1) ON CONFLICT DO NOTHING", [name])


def names(store: Store) -> list[str]:
    return [r[0] for r in store.read("SELECT name FROM meta WHERE name LIKE 'w%' ORDER BY name")]


def unreachable() -> None:
    raise ConnectionError("the database does not answer")


async def test_writes_are_queued_while_down_and_written_in_order_after(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("d.db")
    writes = DeferredWrites(store)
    assert await writes.write("divider", put, "w0") is True and len(writes) == 0
    real = store.health
    store.health = StoreHealth(unreachable)
    store.health.failed("a test outage")
    try:
        assert await writes.write("divider", put, "w1") is False
        assert await writes.write("spills", put, "w2") is False
        assert len(writes) == 2 and names(store) == ["w0"]
    finally:
        await store.health.close()
        store.health = real
    await writes.drain()
    assert len(writes) == 0 and names(store) == ["w0", "w1", "w2"]


async def test_a_write_that_can_never_succeed_is_lost_and_counted(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("d.db")
    lost: list[tuple[str, int]] = []
    writes = DeferredWrites(store, lambda what, n: lost.append((what, n)))

    def broken(tx: Tx) -> None:
        tx.execute("INSERT INTO no_such_table VALUES (1)")

    writes.add("usage", broken, ())
    writes.add("divider", put, ("w9",))
    for _ in range(200):  # the store is up: the queue is drained at once, on the loop
        if not len(writes):
            break
        await asyncio.sleep(0.01)
    assert lost == [("usage", 1)] and names(store) == ["w9"]


async def test_what_is_left_at_shutdown_is_counted_as_lost(new_store: Callable[[str], Store]
                                                           ) -> None:
    store = new_store("d.db")
    lost: list[tuple[str, int]] = []
    writes = DeferredWrites(store, lambda what, n: lost.append((what, n)))
    store.health = StoreHealth(unreachable)
    store.health.failed("a test outage")
    try:
        for name in ("w1", "w2", "w3"):
            writes.add("spills" if name != "w3" else "divider", put, (name,))
        writes.give_up()
    finally:
        await store.health.close()
    assert sorted(lost) == [("divider", 1), ("spills", 2)] and len(writes) == 0
