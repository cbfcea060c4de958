"""What both backends share (``proxy.store.base``): ``?`` placeholders become psycopg's outside
quoted text, PostgreSQL rows answer like ``sqlite3.Row``, and an unreachable store is a 503
the client may retry."""

from __future__ import annotations

from concurrent.futures import Future

from proxy.store.base import Row, StoreUnavailable, to_pyformat


def test_placeholders_are_translated_outside_quoted_text() -> None:
    assert to_pyformat("SELECT '?', \"a?\" FROM t WHERE x = ? AND y LIKE '5%' AND z % 2 = ?"
                       ) == ("SELECT '?', \"a?\" FROM t WHERE x = %s AND y LIKE '5%%' "
                             "AND z %% 2 = %s")
    assert to_pyformat("SELECT 'it''s ?' WHERE a = ?") == "SELECT 'it''s ?' WHERE a = %s"


def test_a_row_answers_by_position_and_by_column_name() -> None:
    row = Row(("id", "org"), ["k1", "acme"])
    assert (row[0], row["org"], row.keys(), list(row), dict(zip(row.keys(), row, strict=True))
            ) == ("k1", "acme", ("id", "org"), ["k1", "acme"], {"id": "k1", "org": "acme"})
    assert tuple(row[0:1]) == ("k1",)


def test_store_unavailable_is_a_retryable_503_keeping_its_pending_write() -> None:
    pending: Future[None] = Future()
    e = StoreUnavailable("deadline", pending=pending)
    assert (e.status, e.code, e.detail, e.pending) == (503, "store_unavailable", "deadline",
                                                       pending)
    assert StoreUnavailable("down").pending is None
