"""SQLite store migrations (old files keep migrating as released): 004 drops the columns 003
created but nothing ever wrote, keeping the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlite_utils

from proxy.store import MIGRATIONS, Store, migrate

DROPPED = {"conversations": "usage_messages", "compactions": "text"}
CONVERSATION: dict[str, Any] = {
    "id": "acme:ticket-4711", "org": "acme", "created_at": 1700000000.5,
    "updated_at": 1700000100.25, "usage_prompt_tokens": 1234, "usage_estimate": 1200,
    "usage_messages": None}
COMPACTION: dict[str, Any] = {
    "id": "div_0123456789abcdef", "conversation": "acme:ticket-4711", "seq": 1,
    "created_at": 1700000050.0, "kind": "auto", "text": None, "prefix_hash": "ab" * 32,
    "covered": 58, "preserved": "[0, 1, 57]", "summary": "## Task\nfix the build",
    "summary_model": "gpt-4o", "summary_tokens": 412, "tokens_before": 27310,
    "tokens_after": 6120, "status": "compacted"}


def _without(row: dict[str, Any], column: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != column}


def _columns(db: sqlite_utils.Database, table: str) -> set[str]:
    return set(db.table(table).columns_dict)


def _schema(db: sqlite_utils.Database) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in db.execute(
        "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name").fetchall()]


def _old_database(path: Path) -> sqlite_utils.Database:
    """A database as released before 004: migrations 001-003, one conversation, one divider."""
    db = sqlite_utils.Database(path)
    assert migrate(db, MIGRATIONS[:3]) == ["001_keys", "002_policy_layers", "003_conversations"]
    with db.conn:
        db.table("conversations").insert(CONVERSATION)
        db.table("compactions").insert(COMPACTION)
    return db


def test_new_migrations_are_appended_after_the_released_ones() -> None:
    assert [name for name, _ in MIGRATIONS] == [
        "001_keys", "002_policy_layers", "003_conversations", "004_drop_unused_columns",
        "005_usage_totals", "006_truncated_summaries", "007_usage_hourly", "008_leases",
        "009_console_signouts", "010_costs"]


def test_a_fresh_database_has_no_unused_columns(tmp_path: Path) -> None:
    db = sqlite_utils.Database(tmp_path / "fresh.db")
    assert migrate(db) == [name for name, _ in MIGRATIONS]
    assert _columns(db, "conversations") == {
        "id", "org", "created_at", "updated_at", "usage_prompt_tokens", "usage_estimate",
        "public_id", "last_tokens_before", "last_tokens_after"}
    assert _columns(db, "compactions") == set(COMPACTION) - {"text"} | {"truncated"}


def test_004_keeps_rows_values_and_indexes_of_an_old_database(tmp_path: Path) -> None:
    db = _old_database(tmp_path / "old.db")
    for table, column in DROPPED.items():
        assert column in _columns(db, table)

    assert migrate(db) == ["004_drop_unused_columns", "005_usage_totals",
                           "006_truncated_summaries", "007_usage_hourly", "008_leases",
                           "009_console_signouts", "010_costs"]

    for table, column in DROPPED.items():
        assert column not in _columns(db, table)
    assert list(db.table("conversations").rows) == [{
        **_without(CONVERSATION, "usage_messages"), "public_id": None,
        "last_tokens_before": None, "last_tokens_after": None}]
    assert list(db.table("compactions").rows) == [{**_without(COMPACTION, "text"),
                                                   "truncated": 0}]
    assert db.table("conversations").pks == ["id"]
    assert db.table("compactions").pks == ["id"]
    unique = [i.columns for i in db.table("compactions").indexes if i.unique and i.origin == "c"]
    assert unique == [["conversation", "seq"]]


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    db = _old_database(tmp_path / "old.db")
    migrate(db)
    schema, rows = _schema(db), list(db.table("compactions").rows)
    assert migrate(db) == []
    assert _schema(db) == schema
    assert list(db.table("compactions").rows) == rows
    applied = [r["name"] for r in db.table("_migrations").rows_where(order_by="name")]
    assert applied == [name for name, _ in MIGRATIONS]


def test_opening_the_store_migrates_an_old_database(tmp_path: Path) -> None:
    _old_database(tmp_path / "old.db").conn.close()
    store = Store(tmp_path / "old.db")
    try:
        row = store.read_one("SELECT * FROM compactions")
        assert dict(row) == {**_without(COMPACTION, "text"), "truncated": 0}
        assert "usage_messages" not in _columns(store.backend.db, "conversations")
    finally:
        store.close()
