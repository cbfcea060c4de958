"""The store's one migration list (``proxy.store.schema``), applied by both backends: a fresh
SQLite file and a fresh PostgreSQL schema end with the same tables, columns, types, keys and
indexes; databases made by the released per-backend migrations (``released/*.sql``, dumped
from that code) migrate on, keeping their rows; a migration is applied whole or not at all,
and once however many processes start together."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pgtest import fresh_schema

from proxy.store import Store
from proxy.store import postgres as pg
from proxy.store import sqlite as lite
from proxy.store.schema import MIGRATIONS, TYPES, Migration

RELEASED = Path(__file__).parent / "released"
NAMES = [m.name for m in MIGRATIONS]
# Each backend's column types, as its catalog names them, in the schema's portable terms.
PORTABLE = {"TEXT": "text", "INTEGER": "int", "REAL": "real",
            "text": "text", "bigint": "int", "double precision": "real"}
Column = tuple[str, bool, bool, str | None]  # type, NOT NULL, in the primary key, default
Schema = dict[str, dict[str, Column]]
Index = tuple[str, str, bool, tuple[str, ...]]  # table, name, unique, columns

CONVERSATION = ("acme:ticket-4711", "acme", 1700000000.5, 1700000100.25, 1234, 1200, None)
COMPACTION = ("div_0123456789abcdef", "acme:ticket-4711", 1, 1700000050.0, "auto", None,
              "ab" * 32, 58, "[0, 1, 57]", "## Task\nfix the build", "gpt-4o", 412, 27310, 6120,
              "compacted")


def _default(value: Any) -> str | None:
    """A column default without the cast PostgreSQL adds (``'0'::bigint`` -> ``0``)."""
    return None if value is None else re.sub(r"::[\w ]+$", "", str(value)).strip("'")


def sqlite_schema(conn: sqlite3.Connection) -> tuple[Schema, set[Index]]:
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    schema: Schema = {}
    indexes: set[Index] = set()
    for t in tables:
        schema[t] = {name: (PORTABLE[kind], bool(notnull) or pk > 0, pk > 0, _default(dflt))
                     for _, name, kind, notnull, dflt, pk in conn.execute(
                         f"PRAGMA table_info({t})")}
        for _, name, unique, origin, _ in conn.execute(f"PRAGMA index_list({t})"):
            if origin == "c":
                columns = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})"))
                indexes.add((t, name, bool(unique), columns))
    return schema, indexes


# From the catalog itself: information_schema's views are slow to join on a busy server.
PG_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid), COALESCE(a.attnum = ANY(i.indkey), false)
FROM pg_class c
JOIN pg_namespace ns ON ns.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE ns.nspname = current_schema() AND c.relkind = 'r'"""
PG_INDEXES = """
SELECT t.relname, i.relname, ix.indisunique, array_agg(a.attname::text ORDER BY k.n)
FROM pg_index ix
JOIN pg_class i ON i.oid = ix.indexrelid
JOIN pg_class t ON t.oid = ix.indrelid
JOIN pg_namespace ns ON ns.oid = t.relnamespace
CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
WHERE ns.nspname = current_schema() AND NOT ix.indisprimary
GROUP BY t.relname, i.relname, ix.indisunique"""


def pg_schema(url: str) -> tuple[Schema, set[Index]]:
    schema: Schema = {}
    with pg.connect(url) as conn:
        for table, name, kind, notnull, dflt, pk in conn.execute(PG_COLUMNS).fetchall():
            schema.setdefault(table, {})[name] = (PORTABLE[kind], notnull, pk, _default(dflt))
        indexes = {(t, n, u, tuple(c)) for t, n, u, c in conn.execute(PG_INDEXES).fetchall()}
    return schema, indexes


def unnamed(indexes: set[Index]) -> set[tuple[str, bool, tuple[str, ...]]]:
    return {(t, u, c) for t, _, u, c in indexes}


def released(name: str) -> str:
    return (RELEASED / name).read_text()


def sqlite_db(path: Path, script: str = "") -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(script)
    return conn


@pytest.fixture
def schema_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


# --- the list itself (no database) ------------------------------------------------------------


def test_released_migrations_keep_their_names_and_new_ones_are_appended() -> None:
    assert NAMES == [
        "001_keys", "002_policy_layers", "003_conversations", "004_drop_unused_columns",
        "005_usage_totals", "006_truncated_summaries", "007_usage_hourly", "008_leases",
        "009_console_signouts", "010_costs", "011_prepared_summaries", "012_usage_batches",
        "013_keys_changed", "014_reasoning_lost", "015_divider_reasoning",
        "016_shadow_usage", "017_divider_covered"]


def test_every_column_type_is_written_as_a_placeholder() -> None:
    """Column types are the schema's ``{text}``, ``{int}``, ``{real}``, never one engine's own
    (a column defined after ``(``, ``, `` or ``ADD COLUMN``; ``PRIMARY KEY (...)`` aside)."""
    defined = re.compile(r'(?:\(|, |ADD COLUMN )("?\w+"?) ([^\s,)]+)')
    for migration in MIGRATIONS:
        for statement in migration.statements:
            for column, kind in defined.findall(statement):
                assert (column, kind) == ("PRIMARY", "KEY") or re.fullmatch(
                    r"\{(text|int|real)\}", kind), (migration.name, column, kind)


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_each_backend_gets_its_own_types(kind: str) -> None:
    for migration in MIGRATIONS:
        assert not [s for s in migration.sql(kind) if "{" in s or "}" in s]
    types = TYPES[kind]
    assert MIGRATIONS[0].sql(kind)[0] == (
        f"CREATE TABLE keys (id {types['text']} PRIMARY KEY, key_hash {types['text']} NOT NULL, "
        f"org {types['text']} NOT NULL, \"user\" {types['text']}, kind {types['text']} NOT NULL, "
        f"created_at {types['real']} NOT NULL, revoked_at {types['real']})")


# --- both backends ------------------------------------------------------------------------------


@pytest.mark.own_store
def test_a_fresh_sqlite_file_and_a_fresh_postgres_schema_have_the_same_schema(
        schema_url: str, tmp_path: Path) -> None:
    Store(tmp_path / "fresh.db").close()
    Store(schema_url).close()
    lite_schema, lite_indexes = sqlite_schema(sqlite_db(tmp_path / "fresh.db"))
    pg_columns, pg_indexes = pg_schema(schema_url)
    assert pg_columns == lite_schema
    assert pg_indexes == lite_indexes
    assert set(lite_schema) == {
        "_migrations", "keys", "meta", "policy_layers", "conversations", "compactions",
        "spills", "usage_totals", "usage_hourly", "leases", "learned_windows",
        "console_signouts", "prepared_summaries", "usage_batches"}
    assert lite_schema["usage_hourly"]["cost_spent_usd"] == ("real", True, False, "0")
    assert lite_schema["policy_layers"]["user"] == ("text", True, True, None)


@pytest.mark.own_store
def test_the_released_sqlite_code_made_the_same_columns_as_the_one_list(tmp_path: Path) -> None:
    """A file fully migrated by the released SQLite code (sqlite-utils) and a fresh one differ
    at most where that code declared less: no NOT NULL and no default on
    ``prepared_summaries.truncated``, which every write sets."""
    Store(tmp_path / "fresh.db").close()
    fresh, fresh_indexes = sqlite_schema(sqlite_db(tmp_path / "fresh.db"))
    old_db = sqlite_db(tmp_path / "old.db", released("sqlite-011.sql"))
    assert lite.migrate(old_db) == NAMES[11:]  # what came after that release
    old, old_indexes = sqlite_schema(old_db)
    assert old_indexes == fresh_indexes
    assert old["prepared_summaries"].pop("truncated") == ("int", False, False, None)
    assert fresh["prepared_summaries"].pop("truncated") == ("int", True, False, "0")
    assert old == fresh


@pytest.mark.own_store
def test_the_released_postgres_code_made_the_same_columns_as_the_one_list(
        schema_url: str) -> None:
    with pg.connect(schema_url) as conn:
        conn.execute(released("postgres-011.sql"))
        assert pg.migrate(conn) == NAMES[11:]
    old, old_indexes = pg_schema(schema_url)
    with fresh_schema() as other:
        Store(other).close()
        fresh, fresh_indexes = pg_schema(other)
    assert old == fresh
    assert unnamed(old_indexes) == unnamed(fresh_indexes)


# --- upgrades from released databases ----------------------------------------------------------


def _old_rows(conn: Any) -> None:
    conn.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?)"
                 if isinstance(conn, sqlite3.Connection) else
                 "INSERT INTO conversations VALUES (%s, %s, %s, %s, %s, %s, %s)", CONVERSATION)
    marks = ", ".join(["?" if isinstance(conn, sqlite3.Connection) else "%s"] * len(COMPACTION))
    conn.execute(f"INSERT INTO compactions VALUES ({marks})", COMPACTION)


def _check_upgraded(store: Store) -> None:
    assert dict(store.read_one("SELECT * FROM conversations")) == {
        "id": "acme:ticket-4711", "org": "acme", "created_at": 1700000000.5,
        "updated_at": 1700000100.25, "usage_prompt_tokens": 1234, "usage_estimate": 1200,
        "public_id": None, "last_tokens_before": None, "last_tokens_after": None}
    row = dict(store.read_one("SELECT * FROM compactions"))
    assert "text" not in row and row["truncated"] == 0 and row["summary"] == COMPACTION[9]
    rec, plaintext = store.keys.create("acme")  # the schema serves the code
    assert store.keys.find_many([]) == [] and store.keys.all() == [rec] and plaintext


@pytest.mark.own_store
def test_a_released_sqlite_file_at_003_migrates_on_keeping_its_rows(tmp_path: Path) -> None:
    conn = sqlite_db(tmp_path / "old.db", released("sqlite-003.sql"))
    _old_rows(conn)
    conn.close()
    store = Store(tmp_path / "old.db")
    try:
        _check_upgraded(store)
        assert [r[0] for r in store.read("SELECT name FROM _migrations ORDER BY name")] == NAMES
    finally:
        store.close()
    Store(tmp_path / "fresh.db").close()
    upgraded, indexes = sqlite_schema(sqlite_db(tmp_path / "old.db"))
    fresh, fresh_indexes = sqlite_schema(sqlite_db(tmp_path / "fresh.db"))
    assert upgraded == fresh and indexes == fresh_indexes


def test_a_released_sqlite_file_at_011_applies_only_what_came_after(tmp_path: Path) -> None:
    conn = sqlite_db(tmp_path / "old.db", released("sqlite-011.sql"))
    before = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    assert lite.migrate(conn) == NAMES[11:]
    after = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    # Nothing it had changed but the tables that gained columns: keys (013), the usage tables
    # (014).
    grown = {"keys": "changed_version", "usage_totals": "reasoning_dropped",
             "usage_hourly": "reasoning_dropped", "compactions": "reasoning_removed"}
    assert {b for b in before if b[0] not in grown} <= set(after)
    for table, column in grown.items():
        assert column in dict(after)[table] and column not in dict(before)[table]
    assert {n for n, _ in set(after) - set(before)} == {
        *grown, "usage_batches", "idx_usage_batches_at", "sqlite_autoindex_usage_batches_1",
        "idx_keys_changed_version"}
    assert lite.migrate(conn) == []


@pytest.mark.own_store
def test_a_released_postgres_schema_at_003_migrates_on_keeping_its_rows(schema_url: str
                                                                        ) -> None:
    with pg.connect(schema_url) as conn:
        conn.execute(released("postgres-003.sql"))
        _old_rows(conn)
    store = Store(schema_url)
    try:
        _check_upgraded(store)
    finally:
        store.close()
    with fresh_schema() as other:
        Store(other).close()
        fresh, fresh_indexes = pg_schema(other)
    upgraded, indexes = pg_schema(schema_url)
    assert upgraded == fresh and unnamed(indexes) == unnamed(fresh_indexes)


# --- how migrations run ---------------------------------------------------------------------

BROKEN = Migration("099_broken", ("CREATE TABLE half (id {text} PRIMARY KEY)",
                                  "ALTER TABLE no_such_table ADD COLUMN x {int}"))


def test_a_failing_sqlite_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    conn = sqlite_db(tmp_path / "s.db")
    with pytest.raises(sqlite3.OperationalError):
        lite.migrate(conn, [*MIGRATIONS, BROKEN])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half" not in tables and "prepared_summaries" in tables
    assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)
    assert lite.migrate(conn) == []


def test_a_failing_postgres_migration_leaves_nothing_behind(schema_url: str) -> None:
    with pg.connect(schema_url) as conn:
        with pytest.raises(pg.psycopg.errors.UndefinedTable):
            pg.migrate(conn, [*MIGRATIONS, BROKEN])
        assert conn.execute("SELECT to_regclass('half')").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)
        assert pg.migrate(conn) == []


def _at_once(migrate: Any, open_conn: Any, n: int = 4) -> list[list[str]]:
    start = threading.Barrier(n)
    results: list[list[str]] = []

    def process() -> None:
        conn = open_conn()
        try:
            start.wait()
            results.append(migrate(conn))
        finally:
            conn.close()

    threads = [threading.Thread(target=process) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_sqlite_processes_starting_at_once_apply_each_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    results = _at_once(lite.migrate, lambda: lite._connect(path))
    assert sorted(n for r in results for n in r) == NAMES
    conn = sqlite_db(path)
    assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(NAMES)


def test_replicas_starting_at_once_apply_each_migration_once(schema_url: str) -> None:
    results = _at_once(pg.migrate, lambda: pg.connect(schema_url))
    assert sorted(len(r) for r in results) == [0, 0, 0, len(MIGRATIONS)]
    with pg.connect(schema_url) as conn:
        assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)
