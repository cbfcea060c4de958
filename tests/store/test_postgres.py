"""The PostgreSQL backend on a real server, without the proxy: transactions commit or roll back
whole, snapshots are read-only, rows answer by name and position, connections the server
dropped are replaced unseen, a break at COMMIT is an unknown outcome, and nothing it prints
carries the URL's password (its migrations: ``test_schema.py``; a proxy on it through outages:
``test_store_outage.py``). These run in both suite runs: PostgreSQL is always there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from pgtest import SERVER_URL, fresh_schema

from proxy.store.base import CommitUnknown, Tx
from proxy.store.postgres import PostgresBackend, connect, public_url, scrub


@pytest.fixture
def schema_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture
def backend(schema_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend(f"{schema_url}&application_name=cp-unit-{urlsplit(schema_url).query[-8:]}",
                        pool_size=2)
    yield b
    b.close()


def test_public_url_drops_the_password_and_the_query() -> None:
    assert public_url("postgresql://u:s3cret@db.example:6432/x?sslmode=require") == \
        "postgresql://u@db.example:6432/x"
    assert public_url("postgres://db/x") == "postgres://db/x"


def test_scrub_masks_the_password_wherever_a_message_quotes_it() -> None:
    url = "postgresql://u:s3cret@db/x"
    assert scrub("could not connect: s3cret refused", url) == "could not connect: *** refused"
    assert scrub("no password here", "postgresql://u@db/x") == "no password here"


def _insert(tx: Tx, name: str) -> None:
    tx.execute("INSERT INTO meta (name, value) VALUES (?, ?)", [name, 7])


def test_a_transaction_commits_whole_or_not_at_all(backend: PostgresBackend) -> None:
    with backend.transaction() as tx:
        _insert(tx, "kept")
    with pytest.raises(RuntimeError), backend.transaction() as tx:
        _insert(tx, "dropped")
        raise RuntimeError("the unit of work fails")
    names = {r["name"] for r in backend.read("SELECT name FROM meta", ())}
    assert "kept" in names and "dropped" not in names


def test_rows_answer_by_name_and_position_and_percent_signs_pass(
        backend: PostgresBackend) -> None:
    row = backend.read("SELECT 'a%' AS label, ? AS n", [5])[0]
    assert (row["label"], row[1], row.keys()) == ("a%", 5, ("label", "n"))
    with backend.transaction() as tx:  # no parameters: the statement is sent as written
        assert tx.execute("SELECT '100%' AS p").fetchone()["p"] == "100%"


def test_a_snapshot_is_read_only(backend: PostgresBackend) -> None:
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), backend.snapshot() as tx:
        _insert(tx, "nope")


def test_a_lock_serializes_transactions_that_take_it(backend: PostgresBackend) -> None:
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait(10)
        with backend.transaction() as tx:
            tx.lock("policy layers")
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with backend.transaction() as tx:
        tx.lock("policy layers")
        inside.set()
        time.sleep(0.3)  # the other transaction is waiting on the lock meanwhile
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]


def _cut_all(backend: PostgresBackend) -> int:
    name = urlsplit(backend.url).query.rsplit("=", 1)[1]
    with connect(SERVER_URL) as conn:
        cut: int = conn.execute("SELECT count(pg_terminate_backend(pid, 5000)) FROM "
                                "pg_stat_activity WHERE application_name = %s",
                                [name]).fetchone()[0]
    return cut


def _fill_pool(backend: PostgresBackend) -> None:
    """Hold both pooled connections at once, so the pool keeps two."""
    with backend.pool.connection() as a, backend.pool.connection() as b:
        a.execute("SELECT 1")
        b.execute("SELECT 1")


def test_connections_the_server_dropped_are_replaced_unseen(backend: PostgresBackend) -> None:
    _fill_pool(backend)
    assert _cut_all(backend) == 2
    assert backend.read("SELECT 1 AS one", ())[0]["one"] == 1  # a read: tried on the next
    _fill_pool(backend)
    assert _cut_all(backend) == 2
    with backend.transaction() as tx:  # a write: broken at BEGIN, nothing of it was sent
        _insert(tx, "after-the-cut")
    assert backend.read("SELECT value FROM meta WHERE name = 'after-the-cut'", ()) == [(7,)]
    backend.recover()
    backend.probe()


def test_a_connection_lost_at_commit_is_an_unknown_outcome(backend: PostgresBackend) -> None:
    with pytest.raises(CommitUnknown), backend.transaction() as tx:
        _insert(tx, "in-doubt")
        pid = tx.execute("SELECT pg_backend_pid()").fetchone()[0]
        with connect(SERVER_URL) as other:  # the server ends it before the COMMIT arrives
            other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    assert backend.read("SELECT name FROM meta WHERE name = 'in-doubt'", ()) == []
    # a read-only one is never in doubt: it simply fails
    with pytest.raises(psycopg.OperationalError), backend.snapshot() as tx:
        pid = tx.execute("SELECT pg_backend_pid()").fetchone()[0]
        with connect(SERVER_URL) as other:
            other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


def test_describe_names_the_server_without_credentials(schema_url: str) -> None:
    user_url = schema_url.replace("postgresql://postgres@", "postgresql://postgres:pw-x@")
    b = PostgresBackend(user_url, pool_size=1)
    try:
        assert b.describe().startswith("postgresql postgresql://postgres@")
        assert "pw-x" not in b.describe() and "search_path" not in b.describe()
    finally:
        b.close()
