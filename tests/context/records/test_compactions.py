"""Records: spills by their id or the short id placeholders show, and upstream usage totals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from proxy.context.records.compactions import Records
from proxy.context.stages.mask import SHORT_ID, Spill, placeholder, spill_id
from proxy.store import Store


def records(new_store: Callable[[str], Store]) -> Records:
    return Records(new_store("r.db"))


def test_a_spill_is_found_by_its_id_or_the_placeholders_short_id(
        new_store: Callable[[str], Store]) -> None:
    r = records(new_store)
    content = "the original output " * 50
    sid = spill_id(content)
    spill = Spill(sid, "read_file", "call_1", content, 250, 3)
    asyncio.run(r.add_spills("acme", "conv", [spill], 7.0))
    short = placeholder("read_file", 250, sid).rsplit(" ", 1)[1].rstrip("]")
    assert short == sid[:SHORT_ID]
    for key in (sid, short, sid[:40]):
        found = r.spill("conv", key)
        assert found is not None and found["content"] == content and found["id"] == sid
    for key in (sid[:SHORT_ID - 1], sid.upper(), "z" * 16, sid + "0", "%" * 16):
        assert r.spill("conv", key) is None
    assert r.spill("another-conversation", sid) is None


def test_usage_totals_add_up_and_survive_a_flush(new_store: Callable[[str], Store]) -> None:
    r = records(new_store)
    r.add_upstream_usage("acme", "conv", "m", 1000, 800, written=128, spent=0.25,
                         without=0.5)
    r.add_upstream_usage("acme", "conv", "m", 1200, 1024, written=100, spent=0.125,
                         lost=(2, 0))
    r.add_upstream_usage("acme", "conv", "m", 5000, 4096, written=512, summary=True,
                         spent=1.0)
    r.add_upstream_usage("acme", "conv", "other", 10, 0, lost=(0, 3))
    expected = {"requests": 2, "prompt_tokens": 2200, "cached_tokens": 1824,
                "summary_calls": 1, "summary_prompt_tokens": 5000,
                "summary_cached_tokens": 4096, "cache_write_tokens": 228,
                "summary_cache_write_tokens": 512, "cost_spent_usd": 1.375,
                "cost_without_usd": 0.5, "reasoning_removed": 2, "reasoning_dropped": 0}
    assert r.usage_totals("conv")["m"] == expected  # pending, not yet written
    asyncio.run(r.flush_usage())
    assert r.usage_totals("conv")["m"] == expected
    r.add_upstream_usage("acme", "conv", "m", 100, 0)
    asyncio.run(r.flush_usage())
    again = Records(r.store).usage_totals("conv")  # what another process reads
    assert again["m"]["requests"] == 3 and again["m"]["prompt_tokens"] == 2300
    assert again["other"]["requests"] == 1 and r.exists("conv")
    assert again["other"]["reasoning_dropped"] == 3


def test_concurrent_flushes_of_replicas_lose_nothing(
        store_target: Callable[[str], Path | str]) -> None:
    # Three replicas count usage of the same conversations, each in its own order, and flush
    # at once, again and again: rows are locked in one order, so no flush waits on another in
    # a cycle (PostgreSQL would end one as a deadlock) and every figure is written.
    import random
    import threading

    stores = [Store(store_target("shared.db")) for _ in range(3)]  # one per replica
    replicas = [Records(store) for store in stores]
    conversations = [f"conv-{i:02d}" for i in range(24)]
    failures: list[BaseException] = []

    def flush(r: Records) -> None:
        try:
            asyncio.run(r.flush_usage())
        except BaseException as e:
            failures.append(e)

    for round_ in range(8):
        for n, r in enumerate(replicas):
            order = conversations[:]
            random.Random(round_ * 10 + n).shuffle(order)
            for conv in order:
                r.add_upstream_usage(f"org-{n}", conv, "m", 10, 5, user=f"u{n}")
        threads = [threading.Thread(target=flush, args=(r,)) for r in replicas]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    try:
        assert failures == []
        totals = Records(stores[0]).usage_totals(conversations[0])
        assert totals["m"]["requests"] == 8 * 3 and totals["m"]["prompt_tokens"] == 8 * 3 * 10
    finally:
        for store in stores:
            store.close()


def test_requests_of_a_new_conversation_arriving_together_share_its_reads_and_writes(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("r.db")
    hops: list[str] = []
    run, write = store.run, store.write

    async def counted_run(fn: Callable[..., object], *args: object, **kw: object) -> object:
        hops.append("read")
        return await run(fn, *args, **kw)  # type: ignore[arg-type]

    async def counted_write(fn: Callable[..., object], *args: object, **kw: object) -> object:
        hops.append("write")
        return await write(fn, *args, **kw)  # type: ignore[arg-type]

    store.run, store.write = counted_run, counted_write  # type: ignore[method-assign]
    r = Records(store)

    async def request() -> None:
        await r.refresh("conv")
        await r.ensure("acme", "conv")

    async def together() -> None:
        await asyncio.gather(*(request() for _ in range(12)))

    asyncio.run(together())
    assert r.exists("conv") and r.latest("conv") is None
    assert sorted(hops) == ["read", "write"]  # its row, found absent; then the row written
    asyncio.run(request())  # a later request: from memory, but for the one check of a store
    assert hops[2:] == (["read"] if r.shared else [])  # that other replicas also write
    # The conversation stored, a new process's first requests make one read together.
    other, hops[:] = Records(store), []

    async def first_requests() -> None:
        await asyncio.gather(*(other.ensure("acme", "conv") for _ in range(5)))

    asyncio.run(first_requests())
    assert hops == ["read"]
