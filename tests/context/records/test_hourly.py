"""Usage per organization, user and hour (``proxy.context.records.hourly``): counted in memory,
handed over whole, put back when a write failed (newer turns win), written as additions to the
hour's row and as the conversation's last turn, on the suite's store."""

from __future__ import annotations

from collections.abc import Callable

from proxy.context.records.hourly import COUNTS, HourlyUsage, hour_of
from proxy.store import Store

NOW = 1_700_003_700.5
HOUR = hour_of(NOW)


def test_hours_start_on_the_hour() -> None:
    assert HOUR == 1_700_002_800 and hour_of(HOUR) == HOUR and hour_of(HOUR - 1) == HOUR - 3600


def test_turns_and_upstream_figures_add_up_per_hour() -> None:
    usage = HourlyUsage()
    usage.turn("acme", None, "acme:t", "t", 900, 300, "auto", now=NOW)
    usage.turn("acme", None, "acme:t", "t", 1000, 400, "reused", now=NOW + 10)
    usage.upstream("acme", None, 380, 256, now=NOW, written=64, spent=0.25, without=1.5)
    row = dict(zip(COUNTS, usage.rows[("acme", "", HOUR)], strict=True))
    assert (row["requests"], row["tokens_received"], row["tokens_sent"]) == (2, 1900, 700)
    assert (row["outcome_auto"], row["outcome_reused"], row["prompt_tokens"]) == (1, 1, 380)
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (256, 64)
    assert (row["cost_spent_usd"], row["cost_without_usd"]) == (0.25, 1.5)
    assert usage.turns["acme:t"].before == 1000


def test_a_failed_batch_is_put_back_and_newer_turns_win() -> None:
    usage = HourlyUsage()
    usage.turn("acme", "bob", "acme:t", "t", 100, 50, "none", now=NOW)
    batch = usage.take()
    assert usage.rows == {} and usage.turns == {}
    usage.turn("acme", "bob", "acme:t", "t", 200, 80, "none", now=NOW + 5)
    usage.restore(batch)
    assert usage.rows[("acme", "bob", HOUR)][0] == 2 and usage.turns["acme:t"].before == 200


def test_rows_are_added_to_and_the_last_turn_recorded(new_store: Callable[[str], Store]
                                                      ) -> None:
    store = new_store("h.db")
    for before in (900, 1100):
        usage = HourlyUsage()
        usage.turn("acme", None, "acme:t", "ticket-1", before, 300, "auto", now=NOW)
        store.atomic(lambda tx, u=usage: (u.write_rows(tx), u.write_turn(tx, "acme:t")))
    row = store.read_one('SELECT requests, tokens_received, outcome_auto FROM usage_hourly '
                         'WHERE org = ? AND "user" = ? AND hour = ?', ["acme", "", HOUR])
    assert tuple(row) == (2, 2000, 2)
    conv = store.read_one("SELECT public_id, last_tokens_before, updated_at FROM conversations "
                          "WHERE id = 'acme:t'")
    assert tuple(conv) == ("ticket-1", 1100, NOW)
    empty = HourlyUsage()
    store.atomic(lambda tx: empty.write_turn(tx, "acme:none"))  # no turn: nothing written
    assert store.read_one("SELECT 1 FROM conversations WHERE id = 'acme:none'") is None
