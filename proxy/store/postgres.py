"""The PostgreSQL backend (``CONTEXT_PROXY_DATABASE_URL``): a psycopg 3 connection pool.

psycopg 3 rather than asyncpg: the store is used synchronously (from the writer thread, worker
threads and the CLI), which an async-only driver does not serve. Every connection runs in
autocommit; a transaction is opened explicitly for each unit of work. Migrations carry the same
names as SQLite's and run under an advisory lock (per schema), so replicas starting at once
apply each one exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from proxy.store.base import COST_COUNTS, COST_MONEY, Params, Row, Tx, to_pyformat
from proxy.store.watchdog import PROBE_LIMIT_S, Watchdog

CONNECT_TIMEOUT_S = 2  # a database that does not answer: libpq's floor (it rounds up to 2)
POOL_TIMEOUT_S = 2.0  # how long a worker thread waits for a pooled connection
PROBE_POOL_WAIT_S = 0.1  # a probe's wait for a pooled connection before the pool is renewed
# Once a connection has failed, how long to wait for another until one works again.
FAILING_TIMEOUT_S = 0.25
# A silent partition (packets dropped, no reset) is seen by the kernel in seconds: keepalive
# probes after 2 s idle, 1 s apart, 3 missed; unacknowledged data gives up after 4 s.
LINK_SETTINGS: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1, "keepalives_idle": 2,
    "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": 4000}
OPEN_ERRORS: tuple[type[Exception], ...] = (psycopg.Error,)  # an unreachable or refusing server
_LOCK_KEY = "hashtext('context-proxy migrations ' || current_schema())"  # per schema
_MIGRATION_LOCK = f"SELECT pg_advisory_lock({_LOCK_KEY})"
_MIGRATION_UNLOCK = f"SELECT pg_advisory_unlock({_LOCK_KEY})"

_REAL = "double precision"
MIGRATIONS: list[tuple[str, list[str]]] = [
    ("001_keys", [
        f'CREATE TABLE keys (id text PRIMARY KEY, key_hash text NOT NULL, org text NOT NULL, '
        f'"user" text, kind text NOT NULL, created_at {_REAL} NOT NULL, revoked_at {_REAL})',
        "CREATE UNIQUE INDEX idx_keys_key_hash ON keys (key_hash)",
        "CREATE TABLE meta (name text PRIMARY KEY, value bigint)",
        "INSERT INTO meta (name, value) VALUES ('keys_version', 0)"]),
    ("002_policy_layers", [
        f'CREATE TABLE policy_layers (org text, "user" text, fields text NOT NULL, '
        f'updated_at {_REAL} NOT NULL, PRIMARY KEY (org, "user"))']),
    ("003_conversations", [
        f"CREATE TABLE conversations (id text PRIMARY KEY, org text NOT NULL, "
        f"created_at {_REAL} NOT NULL, updated_at {_REAL}, usage_prompt_tokens bigint, "
        f"usage_estimate bigint, usage_messages bigint)",
        f"CREATE TABLE compactions (id text PRIMARY KEY, conversation text NOT NULL, "
        f"seq bigint NOT NULL, created_at {_REAL}, kind text NOT NULL, text text, "
        f"prefix_hash text NOT NULL, covered bigint NOT NULL, preserved text, "
        f"summary text NOT NULL, summary_model text, summary_tokens bigint, "
        f"tokens_before bigint, tokens_after bigint, status text)",
        "CREATE UNIQUE INDEX idx_compactions_conversation_seq ON compactions (conversation, seq)",
        f"CREATE TABLE spills (conversation text, id text, tool_name text, tool_call_id text, "
        f"content text NOT NULL, tokens bigint, created_at {_REAL}, "
        f"expires_at {_REAL} NOT NULL, PRIMARY KEY (conversation, id))",
        "CREATE INDEX idx_spills_expires_at ON spills (expires_at)"]),
    ("004_drop_unused_columns", [
        "ALTER TABLE conversations DROP COLUMN IF EXISTS usage_messages",
        "ALTER TABLE compactions DROP COLUMN IF EXISTS text"]),
    ("005_usage_totals", [
        "CREATE TABLE usage_totals (conversation text, model text, "
        + ", ".join(f"{c} bigint DEFAULT 0" for c in (
            "requests", "prompt_tokens", "cached_tokens", "summary_calls",
            "summary_prompt_tokens", "summary_cached_tokens"))
        + f", updated_at {_REAL}, PRIMARY KEY (conversation, model))"]),
    ("006_truncated_summaries", [
        "ALTER TABLE compactions ADD COLUMN truncated bigint NOT NULL DEFAULT 0"]),
    ("007_usage_hourly", [
        'CREATE TABLE usage_hourly (org text NOT NULL, "user" text NOT NULL, hour bigint NOT NULL, '
        + ", ".join(f"{c} bigint DEFAULT 0" for c in (
            "requests", "tokens_received", "tokens_sent", "prompt_tokens", "cached_tokens",
            "outcome_auto", "outcome_manual", "outcome_reused", "outcome_failed",
            "outcome_insufficient"))
        + ', PRIMARY KEY (org, "user", hour))',
        "CREATE INDEX usage_hourly_hour ON usage_hourly (hour)",
        "ALTER TABLE conversations ADD COLUMN public_id text",
        "ALTER TABLE conversations ADD COLUMN last_tokens_before bigint",
        "ALTER TABLE conversations ADD COLUMN last_tokens_after bigint",
        "CREATE INDEX conversations_org_updated ON conversations (org, updated_at)"]),
    ("008_leases", [
        f"CREATE TABLE leases (name text PRIMARY KEY, owner text NOT NULL, "
        f"expires_at {_REAL} NOT NULL)",
        f"CREATE TABLE learned_windows (model text PRIMARY KEY, tokens bigint NOT NULL, "
        f"learned_at {_REAL})"]),
    ("009_console_signouts", [
        f"CREATE TABLE console_signouts (nonce text PRIMARY KEY, expires_at {_REAL} NOT NULL)",
        "CREATE INDEX idx_console_signouts_expires_at ON console_signouts (expires_at)",
        "INSERT INTO meta (name, value) VALUES ('signouts_version', 0)"]),
    ("010_costs", [  # sqlite.py's _m010_costs
        *(f"ALTER TABLE {table} ADD COLUMN {c} bigint NOT NULL DEFAULT 0"
          for table, counts in COST_COUNTS.items() for c in counts),
        *(f"ALTER TABLE {table} ADD COLUMN {c} {_REAL} NOT NULL DEFAULT 0"
          for table in COST_COUNTS for c in COST_MONEY)]),
    ("011_prepared_summaries", [
        f"CREATE TABLE prepared_summaries (conversation text PRIMARY KEY, "
        f"prefix_hash text NOT NULL, covered bigint NOT NULL, preserved text NOT NULL, "
        f"summary text NOT NULL, summary_model text, summary_tokens bigint, "
        f"truncated bigint NOT NULL DEFAULT 0, created_at {_REAL})"]),
]


def migrate(conn: psycopg.Connection[Any],
            migrations: list[tuple[str, list[str]]] | None = None) -> list[str]:
    """Apply pending migrations in order (each in its own transaction) under the advisory lock;
    return the names applied. Idempotent; ``conn`` must be in autocommit."""
    conn.execute(_MIGRATION_LOCK)
    try:
        conn.execute(f"CREATE TABLE IF NOT EXISTS _migrations (name text PRIMARY KEY, "
                     f"applied_at {_REAL})")
        done = {r[0] for r in conn.execute("SELECT name FROM _migrations").fetchall()}
        applied = []
        for name, statements in migrations or MIGRATIONS:
            if name in done:
                continue
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO _migrations (name, applied_at) VALUES (%s, %s)",
                             [name, time.time()])
            applied.append(name)
        return applied
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
    def transaction(self) -> Iterator[Tx]:
        with self._connection() as conn, conn.transaction():
            yield PgTx(conn)

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """A read-only transaction that sees one moment (the rows and versions agree)."""
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield PgTx(conn)

    def read(self, sql: str, params: Params) -> list[Any]:
        with self._connection() as conn:
            return PgTx(conn).execute(sql, params).fetchall()

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
