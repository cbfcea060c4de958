"""The PostgreSQL backend: migrations (the same names and columns as SQLite's, applied once when
replicas start together), the database URL setting, and what a client sees when the database
drops its connections or goes away. These run in both suite runs: PostgreSQL is always there."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from pgtest import SERVER_URL, Relay, fresh_schema, on_postgres, via_port

from proxy.context.identity import conversation_key
from proxy.errors import ConfigError
from proxy.settings import load_settings
from proxy.store import MIGRATIONS as SQLITE_MIGRATIONS
from proxy.store import Store
from proxy.store.base import to_pyformat
from proxy.store.postgres import MIGRATIONS, connect, migrate
from proxy.testing.harness import Harness

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture
def schema_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def pg_columns(url: str) -> dict[str, set[str]]:
    with connect(url) as conn:
        rows = conn.execute("SELECT table_name, column_name FROM information_schema.columns "
                            "WHERE table_schema = current_schema()").fetchall()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def sqlite_columns(path: Path) -> dict[str, set[str]]:
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
    finally:
        conn.close()


def test_the_suite_run_uses_the_store_it_was_asked_for(harness: Harness,
                                                       pytestconfig: pytest.Config) -> None:
    assert harness.state.store.kind == ("postgres" if on_postgres(pytestconfig) else "sqlite")


def test_both_backends_have_the_same_migrations_and_columns(schema_url: str,
                                                            tmp_path: Path) -> None:
    assert [n for n, _ in MIGRATIONS] == [n for n, _ in SQLITE_MIGRATIONS]
    with connect(schema_url) as conn:
        assert migrate(conn) == [n for n, _ in MIGRATIONS]
        assert migrate(conn) == []  # idempotent
        applied = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name")]
    assert applied == [n for n, _ in MIGRATIONS]
    Store(tmp_path / "s.db").close()
    assert pg_columns(schema_url) == sqlite_columns(tmp_path / "s.db")


def test_an_interrupted_upgrade_resumes_where_it_stopped(schema_url: str) -> None:
    with connect(schema_url) as conn:
        assert migrate(conn, MIGRATIONS[:3]) == [n for n, _ in MIGRATIONS[:3]]
        conn.execute("INSERT INTO conversations (id, org, created_at, usage_messages) "
                     "VALUES ('acme:c1', 'acme', 1.5, 3)")
    store = Store(schema_url)  # opening the store applies the rest
    try:
        assert dict(store.read_one("SELECT * FROM conversations")) == {
            "id": "acme:c1", "org": "acme", "created_at": 1.5, "updated_at": None,
            "usage_prompt_tokens": None, "usage_estimate": None, "public_id": None,
            "last_tokens_before": None, "last_tokens_after": None}
    finally:
        store.close()


def test_replicas_starting_at_once_apply_each_migration_once(schema_url: str) -> None:
    start = threading.Barrier(4)
    results: list[list[str]] = []

    def replica() -> None:
        with connect(schema_url) as conn:
            start.wait()
            results.append(migrate(conn))

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(len(r) for r in results) == [0, 0, 0, len(MIGRATIONS)]
    with connect(schema_url) as conn:
        assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)


def test_placeholders_are_translated_outside_quoted_text() -> None:
    assert to_pyformat("SELECT '?', \"a?\" FROM t WHERE x = ? AND y LIKE '5%' AND z % 2 = ?"
                       ) == ("SELECT '?', \"a?\" FROM t WHERE x = %s AND y LIKE '5%%' "
                             "AND z %% 2 = %s")


@pytest.mark.parametrize("url", ["mysql://u:pw-s3cret@db/x", "sqlite:///tmp/x.db", "db.example"])
def test_a_database_url_of_another_kind_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"CONTEXT_PROXY_DATABASE_URL": url})
    assert "CONTEXT_PROXY_DATABASE_URL" in str(info.value) and "pw-s3cret" not in str(info.value)


def test_database_settings() -> None:
    settings = load_settings({"CONTEXT_PROXY_DATABASE_URL": "postgres://u@db/x",
                              "CONTEXT_PROXY_DB_POOL_SIZE": "3"})
    assert (settings.store_target, settings.db_pool_size) == ("postgresql://u@db/x", 3)
    assert load_settings({"CONTEXT_PROXY_DATABASE_URL": "", "XDG_DATA_HOME": "/srv/d"}
                         ).store_target == Path("/srv/d/context-proxy/context-proxy.db")
    with pytest.raises(ConfigError, match="CONTEXT_PROXY_DB_POOL_SIZE"):
        load_settings({"CONTEXT_PROXY_DB_POOL_SIZE": "0"})


# --- a database that drops connections or goes away -----------------------------------------


def chat(h: Harness, key: str, conversation: str) -> Any:
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
        return client.chat.completions.create(
            model="gpt-4o", messages=MSG, extra_headers={"X-Conversation-Id": conversation})


def test_dropped_connections_are_retried_unseen(
        make_harness: Callable[..., Harness], schema_url: str) -> None:
    name = "cp-" + urlsplit(schema_url).query[-8:]
    h = make_harness(env={"CONTEXT_PROXY_DATABASE_URL": f"{schema_url}&application_name={name}"})
    key = h.create_key("acme")
    chat(h, key, "before")
    with connect(SERVER_URL) as conn:
        cut = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", [name]).fetchone()[0]
    assert cut >= 1
    key2 = h.create_key("acme")  # a write on a cut connection
    assert chat(h, key2, "after").choices[0].message.content
    assert h.state.context.records.exists(conversation_key("acme", "after"))


@pytest.fixture
def relay() -> Iterator[Relay]:
    r = Relay(urlsplit(SERVER_URL).port or 5432).start()
    yield r
    r.stop()


def test_a_database_gone_away_is_a_503_store_unavailable_then_recovers(
        make_harness: Callable[..., Harness], schema_url: str, relay: Relay) -> None:
    h = make_harness(env={"CONTEXT_PROXY_DATABASE_URL": via_port(schema_url, relay.port)})
    key, unseen = h.create_key("acme"), h.create_key("acme")
    chat(h, key, "c1")
    relay.down()
    assert chat(h, key, "c2").choices[0].message.content  # seen: served from memory
    with pytest.raises(openai.InternalServerError) as info:
        chat(h, unseen, "c2")
    assert info.value.status_code == 503
    assert info.value.body == {"message": "The proxy's store is unavailable; try again shortly.",
                               "type": "server_error", "param": None,
                               "code": "store_unavailable"}
    base = h.base_url.removesuffix("/v1")
    assert httpx.get(f"{base}/readyz").status_code == 503
    relay.up()
    for _ in range(200):  # the pool reconnects in the background: poll, not a timing assertion
        if httpx.get(f"{base}/readyz", timeout=30).status_code == 200:
            break
        time.sleep(0.1)
    assert chat(h, key, "c3").choices[0].message.content
    assert chat(h, unseen, "c3").choices[0].message.content
