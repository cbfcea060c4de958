"""``proxy.store.readonly``: a store read without being written (on the suite's store, SQLite or
a PostgreSQL schema): pages of bounded size in key order, one moment seen throughout, columns
with their types, and one line for a store that cannot be read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.store import Store, Tx
from proxy.store.readonly import ReadOnlyStore, StoreUnreadable, quote


def _fill(target: Path | str, n: int) -> None:
    store = Store(target)
    try:
        def write(tx: Tx) -> None:
            for i in range(n):
                for user in ("", "u"):
                    tx.execute(
                        'INSERT INTO usage_hourly (org, "user", hour, requests, cost_spent_usd) '
                        "VALUES (?, ?, ?, ?, ?)", [f"org{i % 3}", user, 3600 * i, i, i / 4])

        store.atomic(write)
    finally:
        store.close()


def test_pages_cover_every_row_once_in_key_order(
        store_target: Callable[[str], Path | str]) -> None:
    target = store_target("ro.db")
    _fill(target, 7)
    ro = ReadOnlyStore(target)
    try:
        key = ["org", "user", "hour"]
        pages = list(ro.pages("usage_hourly", [*key, "requests"], key, page_rows=4))
    finally:
        ro.close()
    assert [len(p) for p in pages] == [4, 4, 4, 2]
    rows = [r for p in pages for r in p]
    assert len(rows) == 14 and len(set(rows)) == 14
    assert [r[:3] for r in rows] == sorted(r[:3] for r in rows)


def test_columns_carry_their_types(store_target: Callable[[str], Path | str]) -> None:
    target = store_target("ro.db")
    _fill(target, 1)
    ro = ReadOnlyStore(target)
    try:
        types = {c.name: c.type for c in ro.columns("usage_hourly")}
        ro.require(["usage_hourly", "conversations"])
        with pytest.raises(StoreUnreadable, match="no table nothing_here"):
            ro.require(["nothing_here"])
    finally:
        ro.close()
    assert (types["org"], types["user"], types["hour"]) == (str, str, int)
    assert (types["requests"], types["cost_spent_usd"]) == (int, float)


def test_it_sees_one_moment_and_writes_nothing(
        store_target: Callable[[str], Path | str]) -> None:
    target = store_target("ro.db")
    _fill(target, 2)
    ro = ReadOnlyStore(target)
    try:
        assert len(next(ro.pages("usage_hourly", ["org", "user", "hour"],
                                 ["org", "user", "hour"], 100))) == 4
        writer = Store(target)
        try:
            writer.atomic(lambda tx: tx.execute(
                'INSERT INTO usage_hourly (org, "user", hour) VALUES (?, ?, ?)', ["late", "", 0]))
        finally:
            writer.close()
        assert len(next(ro.pages("usage_hourly", ["org", "user", "hour"],
                                 ["org", "user", "hour"], 100))) == 4  # the same moment
        with pytest.raises(StoreUnreadable):
            ro._rows("DELETE FROM usage_hourly")
    finally:
        ro.close()


def test_a_missing_or_foreign_file_is_unreadable_and_not_made(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(StoreUnreadable, match="no such file"):
        ReadOnlyStore(missing)
    assert not missing.exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database " * 100)
    with pytest.raises(StoreUnreadable, match="not a database"):
        ReadOnlyStore(junk)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    ro = ReadOnlyStore(empty)
    try:
        with pytest.raises(StoreUnreadable, match="no context-proxy store"):
            ro.require(["conversations"])
    finally:
        ro.close()
    assert empty.read_bytes() == b""


def test_an_unreachable_server_names_no_password() -> None:
    with pytest.raises(StoreUnreadable) as caught:
        ReadOnlyStore("postgresql://someone:hunter2@127.0.0.1:1/none")
    assert "hunter2" not in str(caught.value) and "\n" not in str(caught.value)


def test_quote() -> None:
    assert quote("user") == '"user"' and quote('a"b') == '"a""b"'
