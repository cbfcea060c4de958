"""The watchdog of PostgreSQL connections (``proxy.store.watchdog``): a statement held past its
limit has its socket cut (the blocked thread gets an ``OperationalError``), one within its
limit is left alone."""

from __future__ import annotations

import psycopg
import pytest
from pgtest import SERVER_URL, require_postgres

from proxy.store.postgres import connect
from proxy.store.watchdog import Watchdog, cut


def test_a_statement_held_past_its_limit_is_cut() -> None:
    require_postgres()
    dog = Watchdog()
    try:
        with connect(SERVER_URL) as conn, pytest.raises(psycopg.OperationalError), \
                dog.watch(conn, limit_s=0.3):
            conn.execute("SELECT pg_sleep(20)")
        assert dog.cuts == 1
        with connect(SERVER_URL) as conn, dog.watch(conn, limit_s=5):
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert dog.cuts == 1
    finally:
        dog.stop()


def test_cutting_a_closed_connection_does_nothing() -> None:
    require_postgres()
    conn = connect(SERVER_URL)
    conn.close()
    cut(conn)  # no socket any more: nothing to cut, nothing raised
    assert conn.closed
