"""Summaries prepared in the background, in the suite's store (``proxy.context.summary.prepared``):
at most one per conversation, replaced whole; applied as the conversation's compaction once (a
second apply reuses the stored one) and dropped with it; one preparation lease at a time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from proxy.context.records.compactions import Records
from proxy.context.summary.prepared import PreparedStore, made_now
from proxy.store import Store

CONV = "acme:t-1"


def prep(summary: str = "S", covered: int = 12) -> object:
    return made_now(CONV, "ab" * 32, covered, (0, 1), summary, "m", 40, False)


async def test_one_prepared_summary_per_conversation_replaced_whole(
        new_store: Callable[[str], Store]) -> None:
    prepared = PreparedStore(Records(new_store("p.db")))
    assert await prepared.load(CONV) is None
    assert await prepared.put("acme", prep("first")) is False  # type: ignore[arg-type]
    assert await prepared.put("acme", prep("second")) is True  # type: ignore[arg-type]
    loaded = await prepared.load(CONV)
    assert loaded is not None and (loaded.summary, loaded.preserved, loaded.status) == (
        "second", (0, 1), "compacted")
    assert await prepared.discard(loaded) is True and await prepared.discard(loaded) is False
    assert await prepared.load(CONV) is None


async def test_applying_stores_one_compaction_however_many_replicas_apply(
        store_target: Callable[[str], Path | str]) -> None:
    a, b = Store(store_target("p.db")), Store(store_target("p.db"))
    try:
        mine, theirs = PreparedStore(Records(a), "replica-a"), PreparedStore(Records(b),
                                                                             "replica-b")
        made = prep()
        await mine.put("acme", made)  # type: ignore[arg-type]
        rec, stored = await mine.apply("acme", made, 9000, 1500)  # type: ignore[arg-type]
        again, second = await theirs.apply("acme", made, 9000, 1500)  # type: ignore[arg-type]
        assert stored and not second and again.id == rec.id and rec.kind == "auto"
        assert (rec.tokens_before, rec.tokens_after, rec.covered) == (9000, 1500, 12)
        assert await mine.load(CONV) is None  # dropped with the apply
    finally:
        a.close()
        b.close()


async def test_one_preparation_lease_per_conversation(
        store_target: Callable[[str], Path | str]) -> None:
    a, b = Store(store_target("p.db")), Store(store_target("p.db"))
    try:
        mine, theirs = PreparedStore(Records(a), "replica-a"), PreparedStore(Records(b),
                                                                             "replica-b")
        first = await mine.claim(CONV)
        assert (first.holder, first.existing, first.newest_seq) == (True, None, 0)
        assert not (await theirs.claim(CONV)).holder
        await mine.put("acme", prep())  # type: ignore[arg-type]
        await mine.apply("acme", prep(), 9000, 1500)  # type: ignore[arg-type]
        later = await mine.claim(CONV)  # its own lease again, extended
        assert later.holder and later.newest_seq == 1
    finally:
        a.close()
        b.close()
