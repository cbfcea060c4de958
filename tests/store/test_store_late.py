"""Telling an unreachable store from a slow one (SPEC section 9): a call that outlives its
deadline only makes the store suspect, and a probe decides; a request waits out one deadline
at most; probes against a refused port are paced. On a real SQLite store and
``proxy.store.health`` with real ping functions (nothing of the proxy is replaced)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from pgtest import fresh_schema

from proxy.store import Store, StoreUnavailable, begin_request
from proxy.store.health import PROBE_EVERY_S, PROBES, VERDICT_S, StoreHealth
from proxy.store.keys import hash_key
from proxy.store.postgres import connect

DEADLINE_S = 0.2  # the store's deadline in these tests: a blocking call outlives it at will


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(tmp_path / "store.db")
    s.deadline_s = DEADLINE_S
    yield s
    await s.aclose()


def blocking(seconds: float) -> Callable[[], str]:
    def call() -> str:
        time.sleep(seconds)
        return "answered"

    return call


async def settle(health: StoreHealth) -> None:
    """Until the verdict on a late call is in (bounded: a verdict takes VERDICT_S at most)."""
    for _ in range(100):
        if health._verdict is None or health._verdict.done():
            return
        await asyncio.sleep(VERDICT_S / 10)
    raise AssertionError("no verdict")


@pytest.mark.own_store
async def test_a_slow_call_on_a_live_store_is_answered_and_leaves_it_up(store: Store) -> None:
    _, key = store.keys.create("acme")
    begin_request()
    # Past its deadline the call is suspect; the probe finds the store alive, so it is waited
    # for (a slow answer is not turned into a 503) and the request goes on as usual.
    assert await store.run(blocking(DEADLINE_S * 3)) == "answered"
    await settle(store.health)
    assert store.up and store.health.outages == 0 and store.health.verdicts == 1
    assert not store.late
    record = await store.run(store.keys.find, hash_key(key))
    assert record is not None and record.org == "acme"


@pytest.mark.own_store
async def test_a_call_past_its_deadline_and_its_patience_fails_late(store: Store) -> None:
    begin_request()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as late:
        await store.run(blocking(DEADLINE_S * 4), patience=DEADLINE_S)
    assert late.value.late and store.up
    assert time.monotonic() - started < DEADLINE_S * 3.5  # it did not wait for the answer
    assert store.late


@pytest.mark.own_store
async def test_a_late_call_on_a_store_the_probe_finds_gone_fails_at_the_verdict(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    store.deadline_s = DEADLINE_S
    gate = threading.Event()
    store.health._ping = lambda: gate.wait(10) and None  # a probe into a partition: no answer
    begin_request()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.run(lambda: gate.wait(10))  # a call the partition swallowed
    took = time.monotonic() - started
    # Failed when the verdict found it down (deadline + VERDICT_S), not after its patience.
    assert DEADLINE_S + VERDICT_S <= took < DEADLINE_S + VERDICT_S + 1.0
    assert not store.up
    gate.set()
    await store.aclose()


async def test_another_call_answering_settles_the_verdict_without_the_probe() -> None:
    gate = threading.Event()

    def ping() -> None:  # a probe stuck behind something: only the other call can tell
        gate.wait(5)

    health = StoreHealth(ping)
    health.late("no answer in 0.9 s")
    await asyncio.sleep(VERDICT_S / 5)
    health.answered()
    await settle(health)
    gate.set()
    assert health.up
    await health.close()


async def test_a_probe_that_fails_or_never_answers_marks_the_store_down() -> None:
    def refused() -> None:
        raise ConnectionRefusedError("refused")

    gate = threading.Event()
    failing, silent = StoreHealth(refused), StoreHealth(lambda: gate.wait(5) and None)
    started = time.monotonic()
    for health in (failing, silent):
        health.late("no answer in 0.9 s")
    await settle(failing)
    assert not failing.up
    await settle(silent)
    assert not silent.up and time.monotonic() - started >= VERDICT_S
    gate.set()
    for health in (failing, silent):
        await health.close()


@pytest.mark.own_store
async def test_a_request_waits_out_one_failed_call_and_background_work_is_not_held_to_it(
        store: Store) -> None:
    begin_request()
    with pytest.raises(StoreUnavailable):
        await store.run(blocking(DEADLINE_S * 3), patience=0)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unavailable"):  # at once, without a thread
        await store.run(blocking(0))
    assert time.monotonic() - started < DEADLINE_S
    assert store.late
    # Work the request spawned (its own task) and a clean-up that must run are still tried.
    assert await asyncio.create_task(store.run(blocking(0))) == "answered"
    assert await store.write(lambda tx: "written", always=True) == "written"
    begin_request()  # the next request starts afresh
    assert not store.late and await store.run(blocking(0)) == "answered"


async def test_probes_of_a_refused_port_are_paced() -> None:
    pings = 0

    def refused() -> None:
        nonlocal pings
        pings += 1
        raise ConnectionRefusedError("refused")

    health = StoreHealth(refused)
    health.failed("refused")
    await asyncio.sleep(1.0)
    await health.close()
    # One new probe per period, at most (unpaced, a refused port is pinged thousands of times).
    assert pings <= 1.0 / PROBE_EVERY_S + PROBES
    assert not health.up


@pytest.mark.own_store
async def test_calls_waiting_on_the_store_end_when_it_is_marked_down(store: Store) -> None:
    begin_request()
    store.deadline_s = 5.0
    waiting = asyncio.ensure_future(store.run(blocking(2.0)))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    store.health.failed("refused")
    with pytest.raises(StoreUnavailable):
        await waiting
    assert time.monotonic() - started < 1.0  # released at once, not at its 5 s deadline


@pytest.mark.own_store
async def test_on_postgresql_a_write_waiting_on_a_lock_holds_up_no_other_write() -> None:
    """A background write (a backlog drained after an outage) and a request's write that wait
    on a lock another connection holds leave the other writes of requests free to go."""
    with fresh_schema() as url:
        store = Store(url)
        blocker = connect(url)
        try:
            blocker.execute("SELECT pg_advisory_lock(hashtext('held'))")
            aside = asyncio.ensure_future(store.write_aside(lambda tx: tx.lock("held")))
            stuck = asyncio.ensure_future(store.write(lambda tx: tx.lock("held"),
                                                      deadline=None))
            await asyncio.sleep(0.2)
            begin_request()
            assert await store.write(lambda tx: "written") == "written"  # within its deadline
            assert not aside.done() and not stuck.done()
            blocker.execute("SELECT pg_advisory_unlock(hashtext('held'))")
            await asyncio.gather(aside, stuck)
        finally:
            blocker.close()
            await store.aclose()
