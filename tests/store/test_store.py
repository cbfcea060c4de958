"""The store interface (``proxy.store.Store``) on the suite's backend: transactions commit whole
or roll back, reads see rows by name, and from async code every call runs off the loop under a
deadline: a missed one marks the store down (calls then fail at once) until a probe finds it
answering again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.store import Store, StoreUnavailable, Tx, is_database_url


def put(tx: Tx, name: str, value: int) -> int:
    tx.execute("INSERT INTO meta (name, value) VALUES (?, ?)", [name, value])
    return value


def test_is_database_url_knows_both_spellings() -> None:
    assert is_database_url("postgresql://u@h/db") and is_database_url("postgres://h/db")
    assert not is_database_url(Path("postgresql://not-a-path-object"))
    assert not is_database_url("/var/lib/context-proxy.db")


def test_atomic_commits_or_rolls_back_whole(new_store: Callable[[str], Store]) -> None:
    store = new_store("s.db")
    assert store.atomic(put, "a", 1) == 1

    def half(tx: Tx) -> None:
        put(tx, "b", 2)
        raise RuntimeError("fails after its first write")

    with pytest.raises(RuntimeError):
        store.atomic(half)
    assert store.read_one("SELECT value FROM meta WHERE name = ?", ["a"])["value"] == 1
    assert store.read_one("SELECT value FROM meta WHERE name = ?", ["b"]) is None
    assert [r[0] for r in store.read("SELECT name FROM meta WHERE name IN ('a', 'b')")] == ["a"]


def test_a_snapshot_sees_one_moment(new_store: Callable[[str], Store]) -> None:
    store = new_store("s.db")
    store.atomic(put, "a", 1)
    written = threading.Event()

    def read_twice(tx: Tx) -> tuple[int, int]:
        first = tx.execute("SELECT value FROM meta WHERE name = 'a'").fetchone()[0]
        threading.Thread(target=lambda: (store.atomic(
            lambda t: t.execute("UPDATE meta SET value = 2 WHERE name = 'a'")), written.set()
        )).start()
        assert written.wait(10)
        return first, tx.execute("SELECT value FROM meta WHERE name = 'a'").fetchone()[0]

    assert store.snapshot(read_twice) == (1, 1)
    assert store.read_one("SELECT value FROM meta WHERE name = 'a'")[0] == 2


def test_versions_and_describe(new_store: Callable[[str], Store]) -> None:
    store = new_store("s.db")
    assert store.versions() == {"keys_version": 0, "policy_version": 0}
    store.ping()
    assert store.describe().startswith(("sqlite ", "postgresql postgresql://"))
    assert (store.path is not None) == (store.kind == "sqlite")


async def test_run_and_write_answer_from_worker_threads(new_store: Callable[[str], Store]
                                                        ) -> None:
    store = new_store("s.db")
    loop_thread = threading.get_ident()
    assert await store.write(put, "w", 5) == 5
    assert await store.run(lambda: threading.get_ident() != loop_thread)
    assert (await store.run(store.read_one, "SELECT value FROM meta WHERE name = 'w'"))[0] == 5


async def test_a_missed_deadline_is_a_late_answer_not_an_outage_while_the_store_answers(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("s.db")
    with pytest.raises(StoreUnavailable) as late:
        await store.run(time.sleep, 0.5, deadline=0.05, patience=0.05)
    assert late.value.detail == "deadline" and late.value.pending is not None and late.value.late
    for _ in range(200):  # a probe decides; poll, no timing assertion
        if store.health.verdicts:
            break
        await asyncio.sleep(0.05)
    assert store.up and store.health.outages == 0  # the probe answered: slow, not gone
    assert await store.write(put, "x", 1) == 1
    await store.aclose()


async def test_a_write_without_deadline_waits_for_its_outcome(new_store: Callable[[str], Store]
                                                              ) -> None:
    store = new_store("s.db")

    def slow(tx: Tx) -> int:
        time.sleep(0.2)
        return put(tx, "slow", 3)

    assert await store.write(slow, deadline=None) == 3 and store.up
