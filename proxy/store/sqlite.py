"""The SQLite backend: one file (WAL), its schema the migrations of ``proxy.store.schema``.

Reads use a reader connection per reader thread (the event loop reaches them through
``Store.run``); write transactions run on the writer connection (``BEGIN IMMEDIATE``)
under one lock, which the store's single writer thread and synchronous callers (the CLI, tests)
share, so the event loop never waits on a disk sync.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.store.base import Params, Tx
from proxy.store.schema import (
    MIGRATIONS,
    MIGRATIONS_TABLE,
    TYPES,
    Migration,
    applied,
    apply_pending,
)

# What opening a file that is no SQLite database, or a folder that cannot be written, raises.
OPEN_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, OSError)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    # WAL with synchronous=NORMAL never corrupts; it may lose the last commits on power loss,
    # which for usage figures and caches of summaries is the right trade for write latency.
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS
            ) -> list[str]:
    """Apply the pending migrations of ``proxy.store.schema`` in order, each in its own
    ``BEGIN IMMEDIATE`` transaction; return the names applied. Idempotent; ``conn`` must be in
    autocommit (``isolation_level=None``)."""
    conn.execute(MIGRATIONS_TABLE.format_map(TYPES["sqlite"]))
    done = applied(SqliteTx(conn))

    def in_transaction(fn: Callable[[Tx], bool]) -> bool:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(SqliteTx(conn))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    return apply_pending("sqlite", in_transaction, done, migrations)


class SqliteTx:
    """A transaction on one connection; rows are ``sqlite3.Row``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        cur = self.conn.cursor()
        cur.row_factory = sqlite3.Row
        return cur.execute(sql, params)

    def lock(self, name: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already lets one writer in at a time."""


class SqliteBackend:
    kind = "sqlite"
    transient: tuple[type[Exception], ...] = ()
    busy: tuple[type[Exception], ...] = ()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = _connect(path)  # the writer's connection
        self.conn.execute("PRAGMA journal_mode = WAL")  # kept by the file: readers see it too
        migrate(self.conn)
        self._local = threading.local()  # one reader connection per reader thread
        self._readers: list[sqlite3.Connection] = []
        self.lock = threading.RLock()

    @property
    def reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self.path)
            conn.row_factory = sqlite3.Row
            with self.lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTx(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """A read transaction on a connection of its own (any thread may call this)."""
        conn = _connect(self.path)
        try:
            conn.execute("BEGIN")
            yield SqliteTx(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()

    def read(self, sql: str, params: Params) -> list[Any]:
        return self.reader.execute(sql, params).fetchall()

    def recover(self) -> None:
        """Nothing to reconnect: a local file."""

    def probe(self) -> None:
        self.read("SELECT 1", ())

    def describe(self) -> str:
        return f"sqlite {self.path}"

    def close(self) -> None:
        with self.lock:
            for conn in self._readers:
                conn.close()
        self.conn.close()
