"""The SQLite backend: one file (WAL) managed with sqlite-utils and ordered migrations.

Reads use a reader connection per reader thread (the event loop reaches them through
``Store.run``); write transactions run on the writer connection (``BEGIN IMMEDIATE``)
under one lock, which the store's single writer thread and synchronous callers (the CLI, tests)
share, so the event loop never waits on a disk sync.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from proxy.store.base import COST_COUNTS, COST_MONEY, Params, Tx

# What opening a file that is no SQLite database, or a folder that cannot be written, raises.
OPEN_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, OSError)

Migration = Callable[[sqlite_utils.Database], None]


def _m001_keys(db: sqlite_utils.Database) -> None:
    db.table("keys").create(
        {"id": str, "key_hash": str, "org": str, "user": str, "kind": str,
         "created_at": float, "revoked_at": float},
        pk="id", not_null={"key_hash", "org", "kind", "created_at"},
    )
    db.table("keys").create_index(["key_hash"], unique=True)
    db.table("meta").create({"name": str, "value": int}, pk="name")
    db.table("meta").insert({"name": "keys_version", "value": 0})


def _m002_policy_layers(db: sqlite_utils.Database) -> None:
    # One row per organization layer (user = '') or user layer: the fields that layer sets.
    db.table("policy_layers").create(
        {"org": str, "user": str, "fields": str, "updated_at": float},
        pk=("org", "user"), not_null={"fields", "updated_at"},
    )


def _m003_conversations(db: sqlite_utils.Database) -> None:
    db.table("conversations").create(
        {"id": str, "org": str, "created_at": float, "updated_at": float,
         "usage_prompt_tokens": int, "usage_estimate": int, "usage_messages": int},
        pk="id", not_null={"org", "created_at"},
    )
    # One row per compaction; each is also the conversation's divider record.
    db.table("compactions").create(
        {"id": str, "conversation": str, "seq": int, "created_at": float, "kind": str,
         "text": str, "prefix_hash": str, "covered": int, "preserved": str, "summary": str,
         "summary_model": str, "summary_tokens": int, "tokens_before": int,
         "tokens_after": int, "status": str},
        pk="id", not_null={"conversation", "seq", "kind", "prefix_hash", "covered", "summary"},
    )
    db.table("compactions").create_index(["conversation", "seq"], unique=True)
    db.table("spills").create(
        {"conversation": str, "id": str, "tool_name": str, "tool_call_id": str,
         "content": str, "tokens": int, "created_at": float, "expires_at": float},
        pk=("conversation", "id"), not_null={"content", "expires_at"},
    )
    db.table("spills").create_index(["expires_at"])


def _m004_drop_unused_columns(db: sqlite_utils.Database) -> None:
    # Created by 003 but never written: a divider's text follows from its kind
    # (CompactionRecord.text), and the usage correction needs only prompt tokens and estimate.
    # transform() rebuilds each table without the column, rows and indexes kept, each in its own
    # transaction; the check makes a re-run after an interruption between the two harmless.
    for table, column in (("conversations", "usage_messages"), ("compactions", "text")):
        if column in db.table(table).columns_dict:
            db.table(table).transform(drop={column})


def _m005_usage_totals(db: sqlite_utils.Database) -> None:
    # What the upstream reported per conversation and model: main calls and summary calls.
    db.table("usage_totals").create(
        {"conversation": str, "model": str, "requests": int, "prompt_tokens": int,
         "cached_tokens": int, "summary_calls": int, "summary_prompt_tokens": int,
         "summary_cached_tokens": int, "updated_at": float},
        pk=("conversation", "model"), defaults={
            "requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "summary_calls": 0,
            "summary_prompt_tokens": 0, "summary_cached_tokens": 0},
    )


def _m006_truncated_summaries(db: sqlite_utils.Database) -> None:
    # A summary the upstream made longer than asked is cut at a sentence; its divider says so.
    db.table("compactions").add_column("truncated", int, not_null_default=0)


def _m007_usage_hourly(db: sqlite_utils.Database) -> None:
    # Per organization, user and hour: what the proxy received and sent (its estimates), what
    # the upstream reported, and the compaction outcomes, for the console's charts and totals
    # (the Prometheus registry restarts empty). Written in batches with usage_totals.
    counts = ("requests", "tokens_received", "tokens_sent", "prompt_tokens", "cached_tokens",
              "outcome_auto", "outcome_manual", "outcome_reused", "outcome_failed",
              "outcome_insufficient")
    db.table("usage_hourly").create(
        {"org": str, "user": str, "hour": int, **dict.fromkeys(counts, int)},
        pk=("org", "user", "hour"), defaults=dict.fromkeys(counts, 0),
        not_null={"org", "user", "hour"})
    db.table("usage_hourly").create_index(["hour"])
    # The conversation's client-facing id and its last turn, for the console's list.
    for column, kind in (("public_id", str), ("last_tokens_before", int),
                         ("last_tokens_after", int)):
        db.table("conversations").add_column(column, kind)
    db.table("conversations").create_index(["org", "updated_at"])


def _m008_leases(db: sqlite_utils.Database) -> None:
    # Claims with an expiry, shared by replicas: the compaction of one conversation's prefix
    # in the making, and the background jobs (one replica at a time).
    db.table("leases").create({"name": str, "owner": str, "expires_at": float}, pk="name",
                              not_null={"owner", "expires_at"})
    # Context limits that the upstream stated when it refused a request as too long.
    db.table("learned_windows").create({"model": str, "tokens": int, "learned_at": float},
                                       pk="model", not_null={"tokens"})


def _m009_console_signouts(db: sqlite_utils.Database) -> None:
    # Console sessions signed out before their expiry (the cookie is refused on every replica
    # until then); a row is purged once the session would have expired anyway.
    db.table("console_signouts").create({"nonce": str, "expires_at": float}, pk="nonce",
                                        not_null={"expires_at"})
    db.table("console_signouts").create_index(["expires_at"])
    db.table("meta").insert({"name": "signouts_version", "value": 0})


def _m010_costs(db: sqlite_utils.Database) -> None:
    for table, counts in COST_COUNTS.items():
        for column in counts:
            db.table(table).add_column(column, int, not_null_default=0)
        for column in COST_MONEY:
            db.table(table).add_column(column, float, not_null_default=0)


def _m011_prepared_summaries(db: sqlite_utils.Database) -> None:
    # At most one summary per conversation prepared in the background and not yet applied:
    # written whole once made (a killed process leaves none), dropped when it is applied.
    db.table("prepared_summaries").create(
        {"conversation": str, "prefix_hash": str, "covered": int, "preserved": str,
         "summary": str, "summary_model": str, "summary_tokens": int, "truncated": int,
         "created_at": float},
        pk="conversation", not_null={"prefix_hash", "covered", "preserved", "summary"})


MIGRATIONS: list[tuple[str, Migration]] = [
    ("001_keys", _m001_keys),
    ("002_policy_layers", _m002_policy_layers),
    ("003_conversations", _m003_conversations),
    ("004_drop_unused_columns", _m004_drop_unused_columns),
    ("005_usage_totals", _m005_usage_totals),
    ("006_truncated_summaries", _m006_truncated_summaries),
    ("007_usage_hourly", _m007_usage_hourly),
    ("008_leases", _m008_leases),
    ("009_console_signouts", _m009_console_signouts),
    ("010_costs", _m010_costs),
    ("011_prepared_summaries", _m011_prepared_summaries),
]


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    # WAL with synchronous=NORMAL never corrupts; it may lose the last commits on power loss,
    # which for usage figures and caches of summaries is the right trade for write latency.
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def migrate(db: sqlite_utils.Database, migrations: list[tuple[str, Migration]] | None = None
            ) -> list[str]:
    """Apply pending migrations in order; return the names applied. Idempotent."""
    db.enable_wal()
    if "_migrations" not in db.table_names():
        db.table("_migrations").create({"name": str, "applied_at": float}, pk="name")
    done = {r["name"] for r in db.table("_migrations").rows}
    applied = []
    for name, fn in migrations or MIGRATIONS:
        if name in done:
            continue
        with db.conn:
            fn(db)
            db.table("_migrations").insert({"name": name, "applied_at": time.time()})
        applied.append(name)
    return applied


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
        self.db = sqlite_utils.Database(_connect(path))
        migrate(self.db)
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
            conn = self.db.conn
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
        self.db.conn.close()
