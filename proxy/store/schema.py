"""The store's schema: one ordered list of migrations, applied as written by both backends.

Each migration is a few statements of the SQL both engines speak, with its column types
written as ``{text}``, ``{int}`` and ``{real}``: ``TYPES`` is the one place where they differ
(SQLite's ``INTEGER`` is 64-bit; PostgreSQL needs ``bigint`` for the same range, and ``double
precision`` for SQLite's ``REAL``). The column named ``user`` is always quoted (``"user"``: a
reserved word on PostgreSQL). A migration is applied whole or not at all, in its own
transaction, and recorded by name in ``_migrations``; a new one is appended, never inserted,
and a released one never changes (databases made by earlier releases apply only what they
lack). ``ALTER TABLE ... DROP COLUMN`` needs SQLite 3.35 or newer (Python 3.11 ships 3.40).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial

from proxy.store.base import Tx

TYPES: dict[str, dict[str, str]] = {
    "sqlite": {"text": "TEXT", "int": "INTEGER", "real": "REAL"},
    "postgres": {"text": "text", "int": "bigint", "real": "double precision"},
}

# Tokens stored in the provider's prompt cache, and money (US dollars: spent upstream and what
# the client's own requests would have cost without the proxy), per conversation and model and
# per organization, user and hour (migration 010_costs).
COST_COUNTS = {"usage_totals": ("cache_write_tokens", "summary_cache_write_tokens"),
               "usage_hourly": ("cache_write_tokens",)}
COST_MONEY = ("cost_spent_usd", "cost_without_usd")
REASONING_COUNTS = ("reasoning_removed", "reasoning_dropped")  # migration 014

# Which migrations a database has (created before the first one runs).
MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS _migrations (name {text} PRIMARY KEY, "
                    "applied_at {real})")


@dataclass(frozen=True)
class Migration:
    name: str
    statements: tuple[str, ...]  # portable SQL, types as ``{text}``, ``{int}``, ``{real}``

    def sql(self, kind: str) -> list[str]:
        """The statements in the dialect of backend ``kind`` (``sqlite`` or ``postgres``)."""
        return [s.format_map(TYPES[kind]) for s in self.statements]


def _counts(names: Sequence[str]) -> str:
    return ", ".join(f"{n} {{int}} DEFAULT 0" for n in names)


MIGRATIONS: tuple[Migration, ...] = (
    Migration("001_keys", (
        'CREATE TABLE keys (id {text} PRIMARY KEY, key_hash {text} NOT NULL, org {text} NOT NULL, '
        '"user" {text}, kind {text} NOT NULL, created_at {real} NOT NULL, revoked_at {real})',
        "CREATE UNIQUE INDEX idx_keys_key_hash ON keys (key_hash)",
        "CREATE TABLE meta (name {text} PRIMARY KEY, value {int})",
        "INSERT INTO meta (name, value) VALUES ('keys_version', 0)")),
    # One row per organization layer (user = '') or user layer: the fields that layer sets.
    Migration("002_policy_layers", (
        'CREATE TABLE policy_layers (org {text}, "user" {text}, fields {text} NOT NULL, '
        'updated_at {real} NOT NULL, PRIMARY KEY (org, "user"))',)),
    # Conversations; one row per compaction, each also the conversation's divider record; the
    # tool outputs masking set aside (spills).
    Migration("003_conversations", (
        "CREATE TABLE conversations (id {text} PRIMARY KEY, org {text} NOT NULL, "
        "created_at {real} NOT NULL, updated_at {real}, usage_prompt_tokens {int}, "
        "usage_estimate {int}, usage_messages {int})",
        "CREATE TABLE compactions (id {text} PRIMARY KEY, conversation {text} NOT NULL, "
        "seq {int} NOT NULL, created_at {real}, kind {text} NOT NULL, text {text}, "
        "prefix_hash {text} NOT NULL, covered {int} NOT NULL, preserved {text}, "
        "summary {text} NOT NULL, summary_model {text}, summary_tokens {int}, "
        "tokens_before {int}, tokens_after {int}, status {text})",
        "CREATE UNIQUE INDEX idx_compactions_conversation_seq ON compactions (conversation, seq)",
        "CREATE TABLE spills (conversation {text}, id {text}, tool_name {text}, "
        "tool_call_id {text}, content {text} NOT NULL, tokens {int}, created_at {real}, "
        "expires_at {real} NOT NULL, PRIMARY KEY (conversation, id))",
        "CREATE INDEX idx_spills_expires_at ON spills (expires_at)")),
    # Created by 003 but never written: a divider's text follows from its kind
    # (CompactionRecord.text), and the usage correction needs only prompt tokens and estimate.
    Migration("004_drop_unused_columns", (
        "ALTER TABLE conversations DROP COLUMN usage_messages",
        "ALTER TABLE compactions DROP COLUMN text")),
    # What the upstream reported per conversation and model: main calls and summary calls.
    Migration("005_usage_totals", (
        "CREATE TABLE usage_totals (conversation {text}, model {text}, " + _counts((
            "requests", "prompt_tokens", "cached_tokens", "summary_calls",
            "summary_prompt_tokens", "summary_cached_tokens"))
        + ", updated_at {real}, PRIMARY KEY (conversation, model))",)),
    # A summary the upstream made longer than asked is cut at a sentence; its divider says so.
    Migration("006_truncated_summaries", (
        "ALTER TABLE compactions ADD COLUMN truncated {int} NOT NULL DEFAULT 0",)),
    # Per organization, user and hour: what the proxy received and sent (its estimates), what
    # the upstream reported, and the compaction outcomes, for the console's charts and totals
    # (the Prometheus registry restarts empty); and each conversation's client-facing id and
    # last turn, for the console's list.
    Migration("007_usage_hourly", (
        'CREATE TABLE usage_hourly (org {text} NOT NULL, "user" {text} NOT NULL, '
        "hour {int} NOT NULL, " + _counts((
            "requests", "tokens_received", "tokens_sent", "prompt_tokens", "cached_tokens",
            "outcome_auto", "outcome_manual", "outcome_reused", "outcome_failed",
            "outcome_insufficient"))
        + ', PRIMARY KEY (org, "user", hour))',
        "CREATE INDEX idx_usage_hourly_hour ON usage_hourly (hour)",
        "ALTER TABLE conversations ADD COLUMN public_id {text}",
        "ALTER TABLE conversations ADD COLUMN last_tokens_before {int}",
        "ALTER TABLE conversations ADD COLUMN last_tokens_after {int}",
        "CREATE INDEX idx_conversations_org_updated_at ON conversations (org, updated_at)")),
    # Claims with an expiry, shared by replicas (proxy.store.leases); context limits that the
    # upstream stated when it refused a request as too long.
    Migration("008_leases", (
        "CREATE TABLE leases (name {text} PRIMARY KEY, owner {text} NOT NULL, "
        "expires_at {real} NOT NULL)",
        "CREATE TABLE learned_windows (model {text} PRIMARY KEY, tokens {int} NOT NULL, "
        "learned_at {real})")),
    # Console sessions signed out before their expiry (the cookie is refused on every replica
    # until then); a row is purged once the session would have expired anyway.
    Migration("009_console_signouts", (
        "CREATE TABLE console_signouts (nonce {text} PRIMARY KEY, expires_at {real} NOT NULL)",
        "CREATE INDEX idx_console_signouts_expires_at ON console_signouts (expires_at)",
        "INSERT INTO meta (name, value) VALUES ('signouts_version', 0)")),
    Migration("010_costs", (
        *(f"ALTER TABLE {table} ADD COLUMN {c} {{int}} NOT NULL DEFAULT 0"
          for table, counts in COST_COUNTS.items() for c in counts),
        *(f"ALTER TABLE {table} ADD COLUMN {c} {{real}} NOT NULL DEFAULT 0"
          for table in COST_COUNTS for c in COST_MONEY))),
    # At most one summary per conversation prepared in the background and not yet applied:
    # written whole once made (a killed process leaves none), dropped when it is applied.
    Migration("011_prepared_summaries", (
        "CREATE TABLE prepared_summaries (conversation {text} PRIMARY KEY, "
        "prefix_hash {text} NOT NULL, covered {int} NOT NULL, preserved {text} NOT NULL, "
        "summary {text} NOT NULL, summary_model {text}, summary_tokens {int}, "
        "truncated {int} NOT NULL DEFAULT 0, created_at {real})",)),
    # The usage batches applied (``proxy.context.records.batches``): a flush whose outcome was
    # unknown is offered again and skipped if its id is here. Ids are purged after a day.
    Migration("012_usage_batches", (
        "CREATE TABLE usage_batches (id {text} PRIMARY KEY, at {real} NOT NULL)",
        "CREATE INDEX idx_usage_batches_at ON usage_batches (at)")),
    # Each key write marks its key with the keys_version it moved the counter to, so a key
    # cache reads only the keys changed since its last check, not every key it holds.
    Migration("013_keys_changed", (
        "ALTER TABLE keys ADD COLUMN changed_version {int} NOT NULL DEFAULT 0",
        "CREATE INDEX idx_keys_changed_version ON keys (changed_version)")),
    # Reasoning lost on models that bind it to its history, per conversation and model and per
    # organization, user and hour: turns a compaction carried without their reasoning
    # (removed) and items the provider dropped (dropped, its input_transformations).
    Migration("014_reasoning_lost", tuple(
        f"ALTER TABLE {table} ADD COLUMN {c} {{int}} NOT NULL DEFAULT 0"
        for table in ("usage_totals", "usage_hourly") for c in REASONING_COUNTS)),
    # What each compaction took: the turns it carried without their bound reasoning.
    Migration("015_divider_reasoning", (
        "ALTER TABLE compactions ADD COLUMN reasoning_removed {int} NOT NULL DEFAULT 0",)),
    # What the proxy would have saved for organizations in shadow mode, per hour.
    Migration("016_shadow_usage", (
        "ALTER TABLE usage_hourly ADD COLUMN shadow_requests {int} NOT NULL DEFAULT 0",
        "ALTER TABLE usage_hourly ADD COLUMN shadow_saved_tokens {int} NOT NULL DEFAULT 0",
        "ALTER TABLE usage_hourly ADD COLUMN shadow_saved_usd {real} NOT NULL DEFAULT 0")),
    # What each compaction's summary covered: the client's messages [first, end) it replaced
    # and the tool outputs among them (tool, tokens, spill id), as JSON lists.
    Migration("017_divider_covered", (
        "ALTER TABLE compactions ADD COLUMN turns {text} NOT NULL DEFAULT '[]'",
        "ALTER TABLE compactions ADD COLUMN outputs {text} NOT NULL DEFAULT '[]'")),
)


def applied(tx: Tx) -> set[str]:
    """The names of the migrations a database has (its ``_migrations`` table must exist)."""
    return {str(r[0]) for r in tx.execute("SELECT name FROM _migrations").fetchall()}


def apply_pending(kind: str, in_transaction: Callable[[Callable[[Tx], bool]], bool],
                  done: Collection[str], migrations: Sequence[Migration] = MIGRATIONS
                  ) -> list[str]:
    """Apply, in order, each of ``migrations`` not in ``done`` (the names the database had when
    read), each in a transaction of its own (``in_transaction(fn)`` runs ``fn(tx)`` in one and
    commits it); return the names applied.

    A migration is looked up again inside its transaction, so two processes migrating one
    database at once (whose write transactions the backend serializes) apply it exactly once."""
    names = []
    for migration in migrations:
        if migration.name not in done and in_transaction(partial(_apply, kind, migration)):
            names.append(migration.name)
    return names


def _apply(kind: str, migration: Migration, tx: Tx) -> bool:
    if tx.execute("SELECT 1 FROM _migrations WHERE name = ?", [migration.name]).fetchone():
        return False
    for statement in migration.sql(kind):
        tx.execute(statement)
    tx.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
               [migration.name, time.time()])
    return True
