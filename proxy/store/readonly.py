"""A store opened for reading only, for the commands that copy it out (``context-proxy export``).

Unlike ``Store``, opening one never migrates, creates or moves anything: a SQLite file is opened
``mode=ro`` (a missing file is an error, not a new store) and a PostgreSQL session runs one
``REPEATABLE READ, READ ONLY`` transaction, which the server itself keeps from writing. Every
read of one ``ReadOnlyStore`` sees the same moment (one read transaction from open to close), and
a table is read in pages of bounded size, in the order of its primary key (keyset paging: each
page starts after the last key of the one before, so a large table never sits in memory whole).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.store import is_database_url
from proxy.store.base import to_pyformat


class StoreUnreadable(Exception):
    """The store cannot be read: no such file, not a database, a server that does not answer,
    or a schema without the tables asked for. The message is one line without credentials."""


@dataclass(frozen=True)
class Column:
    name: str
    type: type  # int, float or str: what the store declares the column as


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"user"`` is a reserved word on PostgreSQL)."""
    return '"' + name.replace('"', '""') + '"'


def _python_type(declared: str) -> type:
    declared = declared.lower()
    if "int" in declared:
        return int
    if any(word in declared for word in ("real", "double", "float", "numeric")):
        return float
    return str


class ReadOnlyStore:
    """The store at ``target`` (a SQLite file path, or a ``postgresql://`` URL), read in one
    read-only transaction until ``close``. Raises ``StoreUnreadable`` when it cannot be opened."""

    def __init__(self, target: Path | str) -> None:
        self.kind = "postgres" if is_database_url(target) else "sqlite"
        self._conn: Any = None
        self._errors: tuple[type[Exception], ...] = (sqlite3.Error,)
        self._url = str(target) if self.kind == "postgres" else None
        try:
            if self._url is not None:
                self._open_postgres(self._url)
            else:
                self._open_sqlite(Path(target))
        except self._errors as e:
            self.close()
            raise StoreUnreadable(self._reason(e)) from None

    def _open_sqlite(self, path: Path) -> None:
        if not path.is_file():
            raise StoreUnreadable("no such file" if not path.exists() else "not a file")
        self._conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                     isolation_level=None, check_same_thread=False)
        self._conn.execute("BEGIN")
        self._conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # not a database?

    def _open_postgres(self, url: str) -> None:
        import psycopg

        from proxy.store.postgres import connect

        self._errors = (psycopg.Error,)
        self._conn = connect(url)
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def _reason(self, error: Exception) -> str:
        reason = " ".join(str(error).split()) or type(error).__name__
        if self._url is not None:
            from proxy.store.postgres import scrub

            reason = scrub(reason, self._url)
        return reason

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "postgres" and params:
            sql = to_pyformat(sql)
        try:
            return [tuple(r) for r in self._conn.execute(sql, list(params)).fetchall()]
        except self._errors as e:
            raise StoreUnreadable(self._reason(e)) from None

    def tables(self) -> set[str]:
        """The names of the store's tables (on PostgreSQL: of the current schema)."""
        if self.kind == "postgres":
            sql = ("SELECT table_name FROM information_schema.tables "
                   "WHERE table_schema = current_schema()")
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        return {str(r[0]) for r in self._rows(sql)}

    def require(self, names: Sequence[str]) -> None:
        """``StoreUnreadable`` naming the first of ``names`` the store has no table of."""
        have = self.tables()
        missing = [n for n in names if n not in have]
        if missing and not have & {"_migrations", "conversations"}:
            raise StoreUnreadable("no context-proxy store there (no tables)")
        if missing:
            raise StoreUnreadable(f"no table {missing[0]} (a store of an older version: "
                                  "`context-proxy serve` migrates it)")

    def columns(self, table: str) -> list[Column]:
        """The table's columns in their order, each with the Python type of its values."""
        if self.kind == "postgres":
            rows = self._rows("SELECT column_name, data_type FROM information_schema.columns "
                              "WHERE table_schema = current_schema() AND table_name = ? "
                              "ORDER BY ordinal_position", [table])
        else:
            rows = [(r[1], r[2]) for r in self._rows(f"PRAGMA table_info({quote(table)})")]
        return [Column(str(name), _python_type(str(declared))) for name, declared in rows]

    def pages(self, table: str, columns: Sequence[str], key: Sequence[str],
              page_rows: int) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (``columns``, in that order), ``page_rows`` at most per page, in
        the order of ``key`` (its primary key, whose columns must be among ``columns``)."""
        select = ", ".join(quote(c) for c in columns)
        order = ", ".join(quote(c) for c in key)
        at = [list(columns).index(c) for c in key]
        first = f"SELECT {select} FROM {quote(table)} ORDER BY {order} LIMIT ?"
        after = (f"SELECT {select} FROM {quote(table)} WHERE ({order}) > "
                 f"({', '.join('?' * len(key))}) ORDER BY {order} LIMIT ?")
        rows = self._rows(first, [page_rows])
        while rows:
            yield rows
            if len(rows) < page_rows:
                return
            last = rows[-1]
            rows = self._rows(after, [*(last[i] for i in at), page_rows])

    def close(self) -> None:
        """End the read transaction and the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(*self._errors):
            conn.close()
