"""The SQLite backend (``proxy.store.sqlite``) on a file: WAL, a reader connection per thread,
write transactions one at a time that roll back whole, snapshots on their own connection."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from proxy.store.schema import MIGRATIONS
from proxy.store.sqlite import OPEN_ERRORS, SqliteBackend, migrate


def test_the_file_is_in_wal_mode_and_migrated(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "s.db")
    try:
        assert backend.read("PRAGMA journal_mode", ())[0][0] == "wal"
        assert backend.read("SELECT count(*) FROM _migrations", ())[0][0] == len(MIGRATIONS)
        assert migrate(backend.conn) == []
        assert backend.describe() == f"sqlite {tmp_path / 's.db'}"
    finally:
        backend.close()


def test_a_failed_transaction_rolls_back_and_the_next_one_commits(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "s.db")
    try:
        with pytest.raises(ValueError), backend.transaction() as tx:
            tx.execute("INSERT INTO meta (name, value) VALUES ('gone', 1)")
            raise ValueError("the unit of work fails")
        with backend.transaction() as tx:
            tx.lock("anything")  # a no-op: write transactions are one at a time already
            tx.execute("INSERT INTO meta (name, value) VALUES ('kept', 2)")
        rows = backend.read("SELECT name, value FROM meta WHERE name IN ('gone', 'kept')", ())
        assert [(r["name"], r[1]) for r in rows] == [("kept", 2)]
    finally:
        backend.close()


def test_each_reader_thread_has_its_own_connection(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "s.db")
    seen: list[sqlite3.Connection] = []
    try:
        seen.append(backend.reader)
        assert backend.reader is seen[0]
        t = threading.Thread(target=lambda: seen.append(backend.reader))
        t.start()
        t.join()
        assert seen[1] is not seen[0]
        with backend.snapshot() as tx:  # a connection of its own, closed after
            assert tx.execute("SELECT count(*) FROM keys").fetchone()[0] == 0
    finally:
        backend.close()
    with pytest.raises(sqlite3.ProgrammingError):  # every connection closed with the backend
        seen[1].execute("SELECT 1")


def test_a_file_that_is_no_database_fails_with_an_open_error(tmp_path: Path) -> None:
    bad = tmp_path / "not.db"
    bad.write_bytes(b"this is not a sqlite file, just some text " * 40)
    with pytest.raises(OPEN_ERRORS):
        SqliteBackend(bad)
    with pytest.raises(OPEN_ERRORS):
        SqliteBackend(tmp_path / "no-such-folder" / "s.db")
