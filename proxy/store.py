"""The embedded store: one SQLite file (WAL) managed with sqlite-utils and ordered migrations.

Reads that sit on the request path use a dedicated reader connection on the event-loop thread
(indexed lookups, microseconds); every write goes through ``Store.write`` which runs it on a
single writer thread, so the event loop never waits on a disk sync.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

T = TypeVar("T")

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


MIGRATIONS: list[tuple[str, Migration]] = [
    ("001_keys", _m001_keys),
    ("002_policy_layers", _m002_policy_layers),
    ("003_conversations", _m003_conversations),
    ("004_drop_unused_columns", _m004_drop_unused_columns),
    ("005_usage_totals", _m005_usage_totals),
    ("006_truncated_summaries", _m006_truncated_summaries),
    ("007_usage_hourly", _m007_usage_hourly),
]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


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


@dataclass(frozen=True)
class KeyRecord:
    id: str
    org: str
    user: str | None
    kind: str  # "proxy" (issued here) or "bound" (a passthrough key's hash bound to an org)
    created_at: float
    revoked_at: float | None


def _key_record(row: dict[str, Any]) -> KeyRecord:
    return KeyRecord(row["id"], row["org"], row["user"], row["kind"], row["created_at"],
                     row["revoked_at"])


class Store:
    """Open (and migrate) the database at ``path``. Synchronous methods are for the CLI and the
    writer thread; ``write`` runs a callable on the writer thread from async code."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite_utils.Database(_connect(path))
        migrate(self.db)
        self.reader = _connect(path)
        self.reader.row_factory = sqlite3.Row
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        # The writer connection is shared by the writer thread and synchronous callers (the CLI,
        # tests): one lock keeps their transactions from interleaving.
        self.lock = threading.RLock()
        self.key_writes = 0  # key writes by this process: the key cache looks at once

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self.lock:
            return fn(*args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread, holding the writer lock."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._locked, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.reader.close()
        self.db.conn.close()

    # --- keys -------------------------------------------------------------------------------

    def _bump_keys_version(self) -> None:
        self.db.execute("UPDATE meta SET value = value + 1 WHERE name = 'keys_version'")
        self.key_writes += 1

    def create_key(self, org: str, user: str | None = None) -> tuple[KeyRecord, str]:
        """Issue a proxy key; returns the record and the plaintext, which is never stored."""
        plaintext = "cp-" + secrets.token_urlsafe(32)
        return self._insert_key(plaintext, org, user, "proxy"), plaintext

    def bind_key(self, plaintext: str, org: str, user: str | None = None) -> KeyRecord:
        """Bind a client's own (passthrough) key, by hash, to an organization."""
        return self._insert_key(plaintext, org, user, "bound")

    def _insert_key(self, plaintext: str, org: str, user: str | None, kind: str) -> KeyRecord:
        row = {"id": "key_" + secrets.token_hex(6), "key_hash": hash_key(plaintext), "org": org,
               "user": user, "kind": kind, "created_at": time.time(), "revoked_at": None}
        with self.lock, self.db.conn:
            self.db.table("keys").insert(row)
            self._bump_keys_version()
        return _key_record(row)

    def list_keys(self) -> list[KeyRecord]:
        return [_key_record(r) for r in self.db.table("keys").rows_where(order_by="created_at")]

    def revoke_key(self, key_id: str) -> bool:
        with self.lock, self.db.conn:
            cur = self.db.execute(
                "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                [time.time(), key_id])
            changed = cur.rowcount > 0
            if changed:
                self._bump_keys_version()
        return changed

    # --- reads on the request path (reader connection) ----------------------------------------

    def data_version(self) -> int:
        """Changes whenever another connection (this process or another) commits."""
        return int(self.reader.execute("PRAGMA data_version").fetchone()[0])

    def keys_version(self) -> int:
        row = self.reader.execute("SELECT value FROM meta WHERE name = 'keys_version'").fetchone()
        return int(row[0]) if row else 0

    def find_key(self, key_hash: str) -> KeyRecord | None:
        row = self.reader.execute("SELECT * FROM keys WHERE key_hash = ?", [key_hash]).fetchone()
        return _key_record(dict(row)) if row else None
