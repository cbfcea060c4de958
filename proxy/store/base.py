"""What both store backends share: the transaction handle, rows, and the outage error.

SQL is written once, in the dialect both engines speak: ``?`` placeholders (translated for
psycopg), ``ON CONFLICT ... DO UPDATE SET c = excluded.c``, ``ON CONFLICT DO NOTHING``, and the
column named ``user`` always quoted (``"user"``: a reserved word on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any, Protocol

from proxy.errors import ApiError

Params = Sequence[Any]


class Cursor(Protocol):
    """What a statement returns (``sqlite3.Cursor`` and ``psycopg.Cursor`` both are one)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Tx(Protocol):
    """One open transaction of a backend. Rows answer both ``row[0]`` and ``row["name"]``."""

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def lock(self, name: str) -> None:
        """Serialize this transaction with every other that locks ``name`` (until it ends):
        a no-op on SQLite, whose write transactions are already one at a time."""
        ...


class Backend(Protocol):
    kind: str  # "sqlite" | "postgres"
    transient: tuple[type[Exception], ...]  # errors worth one retry (a dropped connection)
    busy: tuple[type[Exception], ...]  # no connection free in time: slow, not unreachable

    def transaction(self) -> AbstractContextManager[Tx]: ...

    def snapshot(self) -> AbstractContextManager[Tx]: ...

    def read(self, sql: str, params: Params) -> list[Any]: ...

    def recover(self) -> None: ...

    def probe(self) -> None:
        """Raise unless the database answers now (on a connection of its own where that
        matters), within seconds."""
        ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


class StoreUnavailable(ApiError):
    """The database could not be reached, even on a second try: a 503 the client may retry."""

    def __init__(self, detail: str, pending: Future[Any] | None = None,
                 late: bool = False) -> None:
        super().__init__(503, "The proxy's store is unavailable; try again shortly.",
                         code="store_unavailable", type_="server_error")
        self.detail = detail
        self.late = late  # slow (a missed deadline, no free connection), not found unreachable
        # A write that outlived its deadline still runs on the writer thread: its outcome
        # (committed, or failed) is this future's.
        self.pending = pending


class CommitUnknown(Exception):
    """The connection broke while a write transaction's COMMIT was on its way: it may have
    committed or not. Never repeated blindly (a repeat could apply the write twice); a write
    that must survive this carries its own idempotency key (the usage batches do)."""


class Row(tuple[Any, ...]):
    """A PostgreSQL row that, like ``sqlite3.Row``, answers by position and by column name."""

    _names: tuple[str, ...]

    def __new__(cls, names: tuple[str, ...], values: Sequence[Any]) -> Row:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def keys(self) -> tuple[str, ...]:
        return self._names

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names.index(key))
        return tuple.__getitem__(self, key)

    def __iter__(self) -> Iterator[Any]:
        return tuple.__iter__(self)


@lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (and a literal ``%`` doubled); quoted text kept."""
    out, quote = [], ""
    for ch in sql:
        if quote:
            quote = "" if ch == quote else quote
            out.append("%%" if ch == "%" else ch)
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        else:
            out.append("%%" if ch == "%" else ch)
    return "".join(out)

