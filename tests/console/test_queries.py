"""What the console reads (``proxy.console.queries``) from the suite's store: usage totals per
organization and user with key counts, the last day's hourly series, conversations newest
first with their compaction counts, summaries and unexpired spills (without content)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from proxy.console import queries
from proxy.context.records.hourly import hour_of
from proxy.store import Store, Tx

NOW = 1_700_003_700.0


def add_hour(store: Store, org: str, user: str, hour: int, **counts: float) -> None:
    names = ", ".join(counts)
    store.atomic(lambda tx: tx.execute(
        f'INSERT INTO usage_hourly (org, "user", hour, {names}) VALUES (?, ?, ?, '
        f"{', '.join('?' * len(counts))})", [org, user, hour, *counts.values()]))


def test_totals_per_org_and_user_with_key_counts(new_store: Callable[[str], Store]) -> None:
    store = new_store("c.db")
    h = hour_of(NOW)
    add_hour(store, "acme", "", h, prompt_tokens=100, cached_tokens=40, outcome_auto=1,
                 cost_spent_usd=0.5, cost_without_usd=2.0)
    add_hour(store, "acme", "alice", h, prompt_tokens=300, cached_tokens=60)
    store.keys.create("acme", "alice")
    store.keys.create("beta")
    usage = queries.usage_by_org(store)
    acme = usage["acme"]
    assert acme.org.counts["prompt_tokens"] == 400 and acme.org.cached_share == 0.25
    assert (acme.org.spent, acme.org.saved, acme.org.keys) == (0.5, 1.5, 1)
    assert acme.org.outcomes["auto"] == 1 and acme.users["alice"].keys == 1
    assert acme.users["alice"].counts["prompt_tokens"] == 300
    assert usage["beta"].org.keys == 1 and usage["beta"].org.cached_share is None


def test_the_series_are_the_last_24_hours_oldest_first(new_store: Callable[[str], Store]
                                                       ) -> None:
    store = new_store("c.db")
    last = hour_of(NOW)
    add_hour(store, "acme", "", last, tokens_received=9, tokens_sent=5)
    add_hour(store, "acme", "bob", last, tokens_received=1)
    add_hour(store, "acme", "", last - 23 * 3600, cached_tokens=7)
    add_hour(store, "acme", "", last - 24 * 3600, tokens_received=1000)  # a day ago
    series = queries.hourly_series(store, now=NOW)["acme"]
    assert len(series["tokens_received"]) == queries.HOURS
    assert series["tokens_received"][-1] == 10 and series["tokens_sent"][-1] == 5
    assert series["cached_tokens"][0] == 7 and sum(series["tokens_received"]) == 10


def test_conversations_and_their_records(new_store: Callable[[str], Store]) -> None:
    store = new_store("c.db")

    def fill(tx: Tx) -> None:
        for key, updated in (("acme:a", 2.0), ("acme:b", 3.0), ("beta:c", 4.0)):
            tx.execute("INSERT INTO conversations (id, org, created_at, updated_at, public_id) "
                       "VALUES (?, ?, ?, ?, ?)", [key, key.split(":")[0], 1.0, updated,
                                                  key.split(":")[1]])
        tx.execute("INSERT INTO compactions (id, conversation, seq, kind, prefix_hash, "
                   "covered, summary) VALUES ('div_1', 'acme:a', 1, 'auto', 'h', 3, 'S1')")
        for sid, expires in (("sp_1", time.time() + 600), ("sp_0", time.time() - 1)):
            tx.execute("INSERT INTO spills (conversation, id, tool_name, tool_call_id, content, "
                       "tokens, created_at, expires_at) VALUES ('acme:a', ?, 'grep', 'c1', "
                       "'secret output', 9, 1.0, ?)", [sid, expires])

    store.atomic(fill)
    listed = queries.conversations(store, "acme")
    assert [(c["public_id"], c["compactions"]) for c in listed] == [("b", 0), ("a", 1)]
    assert queries.conversation(store, "acme", "acme:a")["public_id"] == "a"  # type: ignore
    assert queries.conversation(store, "acme", "beta:c") is None  # another org's
    assert queries.summaries(store, "acme:a") == {"div_1": "S1"}
    spills = queries.spills(store, "acme:a")
    assert [s["id"] for s in spills] == ["sp_1"] and "content" not in spills[0]


@pytest.mark.parametrize("name", ["keys", "counts"])
def test_totals_start_at_zero(name: str) -> None:
    totals = queries.Totals()
    assert getattr(totals, name) == (0 if name == "keys" else dict.fromkeys(totals.counts, 0))
