"""The PostgreSQL backend (``CONTEXT_PROXY_DATABASE_URL``): a psycopg 3 connection pool.

psycopg 3 rather than asyncpg: the store is used synchronously (from the writer thread, worker
threads and the CLI), which an async-only driver does not serve. Every connection runs in
autocommit; a transaction is opened explicitly for each unit of work. The migrations are
SQLite's (``proxy.store.schema``), run under an advisory lock (per schema), so replicas
starting at once apply each one exactly once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from proxy.store.base import CommitUnknown, Params, Row, Tx, to_pyformat
from proxy.store.schema import MIGRATIONS, MIGRATIONS_TABLE, TYPES, Migration, apply_pending
from proxy.store.watchdog import PROBE_LIMIT_S, Watchdog

T = TypeVar("T")

CONNECT_TIMEOUT_S = 2  # a database that does not answer: libpq's floor (it rounds up to 2)
POOL_TIMEOUT_S = 2.0  # how long a worker thread waits for a pooled connection
PROBE_POOL_WAIT_S = 0.1  # a probe's wait for a pooled connection before the pool is renewed
# Once a connection has failed, how long to wait for another until one works again.
FAILING_TIMEOUT_S = 0.25
DROPPED_WITHIN_S = 0.5  # a connection the server closed fails at once; a stalled one does not
# A silent partition (packets dropped, no reset) is seen by the kernel in seconds: keepalive
# probes after 2 s idle, 1 s apart, 3 missed; unacknowledged data gives up after 4 s.
LINK_SETTINGS: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1, "keepalives_idle": 2,
    "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": 4000}
OPEN_ERRORS: tuple[type[Exception], ...] = (psycopg.Error,)  # an unreachable or refusing server
_LOCK_KEY = "hashtext('context-proxy migrations ' || current_schema())"  # per schema
_MIGRATION_LOCK = f"SELECT pg_advisory_lock({_LOCK_KEY})"
_MIGRATION_UNLOCK = f"SELECT pg_advisory_unlock({_LOCK_KEY})"

def migrate(conn: psycopg.Connection[Any], migrations: Sequence[Migration] = MIGRATIONS
            ) -> list[str]:
    """Apply the pending migrations of ``proxy.store.schema`` in order (each in its own
    transaction) under the advisory lock; return the names applied. Idempotent; ``conn`` must
    be in autocommit."""
    conn.execute(_MIGRATION_LOCK)
    try:
        conn.execute(MIGRATIONS_TABLE.format_map(TYPES["postgres"]))
        done = {str(r[0]) for r in conn.execute("SELECT name FROM _migrations").fetchall()}

        def in_transaction(fn: Callable[[Tx], bool]) -> bool:
            with conn.transaction():
                return fn(PgTx(conn))

        return apply_pending("postgres", in_transaction, done, migrations)
    finally:
        conn.execute(_MIGRATION_UNLOCK)


def public_url(url: str) -> str:
    """``url`` without its password or query (neither belongs in a log or an error)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + host
    if parts.port:
        netloc += f":{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path}"


def scrub(message: str, url: str) -> str:
    """An error message with the URL's password (should a driver ever quote it) masked."""
    password = urlsplit(url).password
    return message.replace(password, "***") if password else message


def _rows(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    names = tuple(c.name for c in cursor.description or ())

    def make(values: Sequence[Any]) -> Row:
        return Row(names, values)

    return make


def _dropped(conn: psycopg.Connection[Any], started: float) -> bool:
    """Whether ``conn`` failed as one the server had already closed does: at once, not after
    a stall the watchdog ended (the next connection would stall as long)."""
    return conn.broken and time.monotonic() - started < DROPPED_WITHIN_S


def connect(url: str) -> psycopg.Connection[Any]:
    """One autocommit connection (migrations, tests); raises ``psycopg.OperationalError``."""
    return psycopg.connect(url, autocommit=True, **LINK_SETTINGS)


class PgTx:
    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> psycopg.Cursor[Row]:
        if not params:  # psycopg reads % signs only when there are parameters
            return self.conn.execute(sql)
        return self.conn.execute(to_pyformat(sql), list(params))

    def lock(self, name: str) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])


class PostgresBackend:
    kind = "postgres"
    transient: tuple[type[Exception], ...] = (psycopg.OperationalError,)
    busy: tuple[type[Exception], ...] = (PoolTimeout,)

    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = url
        with connect(url) as conn:
            migrate(conn)
        self.pool_size = pool_size
        self.pool = self._open_pool()
        self._renewing = threading.Lock()
        self._failing = False  # a connection failed and none has worked since
        self.watchdog = Watchdog()

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[Row]]:
        pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            self.url, min_size=1, max_size=self.pool_size, timeout=POOL_TIMEOUT_S, open=False,
            name="context-proxy",
            kwargs={"autocommit": True, "row_factory": _rows, **LINK_SETTINGS})
        pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        return pool

    def _renew_pool(self) -> None:
        """A new pool in place of one that cannot hand out a working connection though the
        server answers (after an outage its reconnect attempts back off for many seconds);
        the old one is closed aside, its stalled connections with it."""
        if not self._renewing.acquire(blocking=False):
            return  # another probe is at it
        try:
            old, self.pool = self.pool, self._open_pool()
        finally:
            self._renewing.release()
        threading.Thread(target=old.close, kwargs={"timeout": 1.0}, daemon=True,
                         name="store-old-pool").start()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Row]]:
        with self.pool.connection(
                timeout=FAILING_TIMEOUT_S if self._failing else POOL_TIMEOUT_S) as conn, \
                self.watchdog.watch(conn):
            yield conn
        self._failing = False

    def probe(self) -> None:
        """Raise unless a new connection answers ``SELECT 1`` within seconds (the pool's own
        connections may still be stuck on what a partition swallowed)."""
        with connect(self.url) as conn, self.watchdog.watch(conn, PROBE_LIMIT_S):
            conn.execute("SELECT 1")
        try:  # and the pool can serve: else the first calls would find it down again
            with self.pool.connection(timeout=PROBE_POOL_WAIT_S) as pooled, \
                    self.watchdog.watch(pooled, PROBE_LIMIT_S):
                pooled.execute("SELECT 1")
        except psycopg.Error:
            self._renew_pool()

    @contextmanager
    def _live(self, first: Callable[[psycopg.Connection[Row]], T]
              ) -> Iterator[tuple[psycopg.Connection[Row], T]]:
        """A pooled connection and what ``first(conn)`` answered on it. ``first`` must be safe
        to repeat (``BEGIN``, a read): a connection found broken by it at once (the server
        ended it while it sat in the pool: a restart, a fail-over, an administrator) is
        dropped and the next one tried, up to the pool's size."""
        for attempt in range(self.pool_size + 1):
            with self._connection() as conn:
                started = time.monotonic()
                try:
                    answer = first(conn)
                except psycopg.OperationalError:
                    if _dropped(conn, started) and attempt < self.pool_size:
                        continue  # the pool discards it on its return
                    raise
                yield conn, answer
                return

    @contextmanager
    def _unit(self, begin: str, writes: bool) -> Iterator[Tx]:
        """One transaction on a live pooled connection (``_live``); a break at ``COMMIT`` of
        a write is ``CommitUnknown``."""
        with self._live(lambda conn: conn.execute(begin)) as (conn, _):
            try:
                yield PgTx(conn)
            except BaseException:
                if not conn.broken:  # else the server already rolled it back
                    with contextlib.suppress(psycopg.Error):  # the body's error is the one
                        conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.OperationalError as e:
                if writes and conn.broken:
                    raise CommitUnknown() from e
                raise

    def transaction(self) -> AbstractContextManager[Tx]:
        return self._unit("BEGIN", writes=True)

    def snapshot(self) -> AbstractContextManager[Tx]:
        """A read-only transaction that sees one moment (the rows and versions agree)."""
        return self._unit("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", writes=False)

    def read(self, sql: str, params: Params) -> list[Any]:
        """One statement's rows, on a live pooled connection (``_live``: a read is safe to
        repeat)."""
        with self._live(lambda conn: PgTx(conn).execute(sql, params).fetchall()) as (_, rows):
            return rows

    def recover(self) -> None:
        """Drop the pooled connections that broke (a restarted or failed-over server): each
        idle one is tried under the watchdog (``pool.check()`` would wait forever on one a
        partition stalled), and the retry's wait for a connection is short."""
        self._failing = True
        for _ in range(int(self.pool.get_stats().get("pool_available", 0))):
            try:
                with self.pool.connection(timeout=FAILING_TIMEOUT_S) as conn, \
                        self.watchdog.watch(conn, PROBE_LIMIT_S):
                    conn.execute("SELECT 1")
            except psycopg.Error:  # broken: the pool discards it
                continue

    def describe(self) -> str:
        return f"postgresql {public_url(self.url)}"

    def close(self) -> None:
        self.watchdog.stop()
        self.pool.close(timeout=1.0)
