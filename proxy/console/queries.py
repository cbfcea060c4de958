"""What the console reads from the store: usage totals and series, conversations, their records.

Every query is indexed or bounded (at most ``LIST_LIMIT`` rows of a list) and runs on the
store's read path (``Store.read``). Nothing here returns a key or a key hash: organizations and
users carry key counts only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proxy.context.records.hourly import COUNTS, DOLLARS, OUTCOMES, hour_of
from proxy.store import Store

LIST_LIMIT = 200
HOURS = 24


@dataclass
class Totals:
    """Usage of an organization or a user (all hours the store holds)."""

    keys: int = 0
    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    def add(self, row: Any) -> None:
        for name in COUNTS:  # token counts are integers; money (DOLLARS) is US dollars
            self.counts[name] += float(row[name] or 0) if name in DOLLARS else \
                int(row[name] or 0)

    @property
    def spent(self) -> float:
        """US dollars the upstream calls cost."""
        return self.counts["cost_spent_usd"]

    @property
    def saved(self) -> float:
        """US dollars the clients' own requests would have cost more without the proxy."""
        return self.counts["cost_without_usd"] - self.counts["cost_spent_usd"]

    @property
    def shadow_saved(self) -> float:
        """US dollars the proxy would have saved on the requests it served in shadow mode."""
        return self.counts["shadow_saved_usd"]

    @property
    def reasoning_lost(self) -> int:
        """Thinking blocks and reasoning items lost on models that bind reasoning: turns a
        compaction carried without theirs, and what the provider dropped."""
        return int(self.counts["reasoning_removed"] + self.counts["reasoning_dropped"])

    @property
    def cached_share(self) -> float | None:
        prompt = self.counts["prompt_tokens"]
        return self.counts["cached_tokens"] / prompt if prompt else None

    @property
    def outcomes(self) -> dict[str, int]:
        return {o: int(self.counts[f"outcome_{o}"]) for o in OUTCOMES}


@dataclass
class OrgUsage:
    org: Totals = field(default_factory=Totals)
    users: dict[str, Totals] = field(default_factory=dict)

    def user(self, name: str) -> Totals:
        return self.users.setdefault(name, Totals())


def usage_by_org(store: Store) -> dict[str, OrgUsage]:
    """Organization -> its totals and its users' totals, with active key counts."""
    out: dict[str, OrgUsage] = {}
    sums = ", ".join(f"SUM({c}) AS {c}" for c in COUNTS)
    for row in store.read(f'SELECT org, "user", {sums} FROM usage_hourly GROUP BY org, "user"'):
        usage = out.setdefault(row["org"], OrgUsage())
        usage.org.add(row)
        if row["user"]:
            usage.user(row["user"]).add(row)
    for row in store.read('SELECT org, "user", COUNT(*) AS n FROM keys '
                          'WHERE revoked_at IS NULL GROUP BY org, "user"'):
        usage = out.setdefault(row["org"], OrgUsage())
        usage.org.keys += int(row["n"])
        if row["user"]:
            usage.user(row["user"]).keys += int(row["n"])
    return out


def hourly_series(store: Store, now: float | None = None
                  ) -> dict[str, dict[str, list[int]]]:
    """Organization -> ``tokens_received``/``tokens_sent``/``cached_tokens`` per hour, the last
    ``HOURS`` hours oldest first (the current hour last)."""
    last = hour_of(time.time() if now is None else now)
    first = last - (HOURS - 1) * 3600
    names = ("tokens_received", "tokens_sent", "cached_tokens")
    out: dict[str, dict[str, list[int]]] = {}
    rows = store.read(
        f"SELECT org, hour, {', '.join(f'SUM({n}) AS {n}' for n in names)} FROM usage_hourly "
        "WHERE hour >= ? AND hour <= ? GROUP BY org, hour", [first, last])
    for row in rows:
        series = out.setdefault(row["org"], {n: [0] * HOURS for n in names})
        at = (int(row["hour"]) - first) // 3600
        for n in names:
            series[n][at] = int(row[n] or 0)
    return out


def conversations(store: Store, org: str) -> list[dict[str, Any]]:
    """The organization's conversations, newest first, with their compaction counts."""
    rows = store.read(
        "SELECT c.id, c.public_id, c.created_at, c.updated_at, c.last_tokens_before, "
        "c.last_tokens_after, (SELECT COUNT(*) FROM compactions k WHERE k.conversation = c.id) "
        "AS compactions FROM conversations c WHERE c.org = ? "
        "ORDER BY c.updated_at DESC LIMIT ?", [org, LIST_LIMIT])
    return [dict(r) for r in rows]


def conversation(store: Store, org: str, key: str) -> dict[str, Any] | None:
    row = store.read_one("SELECT * FROM conversations WHERE id = ? AND org = ?", [key, org])
    return dict(row) if row else None


def summaries(store: Store, key: str) -> dict[str, str]:
    """Divider id -> the summary its compaction made."""
    rows = store.read("SELECT id, summary FROM compactions WHERE conversation = ?", [key])
    return {str(r["id"]): str(r["summary"]) for r in rows}


def spills(store: Store, key: str) -> list[dict[str, Any]]:
    """The conversation's retained spills (without their content), in the order they were
    stored (then by id)."""
    rows = store.read(
        "SELECT id, tool_name, tool_call_id, tokens, created_at, expires_at FROM spills "
        "WHERE conversation = ? AND expires_at > ? ORDER BY created_at, id LIMIT ?",
        [key, time.time(), LIST_LIMIT])
    return [dict(r) for r in rows]
