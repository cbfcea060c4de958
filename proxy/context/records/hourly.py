"""Hourly usage per organization and user (table ``usage_hourly``, migration 007), and each
conversation's last turn (columns of ``conversations``).

Counted in memory on the request path (a few additions, no I/O) and written in batches by
``Records.flush_usage``, in the same transaction as ``usage_totals``: the admin console's totals
and charts read them, since the Prometheus registry restarts empty.

Per hour: ``requests``; ``tokens_received`` and ``tokens_sent`` (the proxy's estimates of the
transcript as the client sent it and as it went upstream); ``prompt_tokens`` and
``cached_tokens`` and ``cache_write_tokens`` (what the upstream reported, main and summary calls
alike); one count per compaction outcome other than ``none``; and the money (US dollars, migration
010): ``cost_spent_usd`` upstream and ``cost_without_usd``, what the client's own requests would
have cost without the proxy (``proxy.context.accounting.money``); and for organizations in shadow
mode (migration 016) ``shadow_requests``, ``shadow_saved_tokens`` and ``shadow_saved_usd``, what
the proxy would have saved (``proxy.context.shadow``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.store import Tx

OUTCOMES = ("auto", "manual", "reused", "failed", "insufficient")
MONEY = ("cost_spent_usd", "cost_without_usd")
REASONING = ("reasoning_removed", "reasoning_dropped")  # lost on models that bind it
SHADOW = ("shadow_requests", "shadow_saved_tokens", "shadow_saved_usd")  # migration 016
COUNTS = ("requests", "tokens_received", "tokens_sent", "prompt_tokens", "cached_tokens",
          *(f"outcome_{o}" for o in OUTCOMES), "cache_write_tokens", *MONEY, *REASONING,
          *SHADOW)
DOLLARS = (*MONEY, "shadow_saved_usd")  # the counts that are US dollars, not integers
_PROMPT, _CACHED = COUNTS.index("prompt_tokens"), COUNTS.index("cached_tokens")
_WRITTEN, _SPENT = COUNTS.index("cache_write_tokens"), COUNTS.index("cost_spent_usd")
_REMOVED = COUNTS.index("reasoning_removed")
_SHADOW = COUNTS.index("shadow_requests")

Row = tuple[str, str, int]  # (org, user or '', hour start in epoch seconds)


def hour_of(t: float) -> int:
    """The start of ``t``'s hour, in epoch seconds."""
    return int(t // 3600) * 3600


@dataclass(frozen=True)
class Turn:
    """A conversation's last managed request: its organization, public id and token figures."""

    org: str
    public_id: str
    before: int
    after: int
    at: float


@dataclass
class HourlyUsage:
    """What was counted since the last flush."""

    rows: dict[Row, list[float]] = field(default_factory=dict)
    turns: dict[str, Turn] = field(default_factory=dict)  # conversation key -> its last turn

    def _row(self, org: str, user: str | None, now: float) -> list[float]:
        return self.rows.setdefault((org, user or "", hour_of(now)), [0] * len(COUNTS))

    def turn(self, org: str, user: str | None, conversation: str, public_id: str,
             before: int, after: int, outcome: str, now: float | None = None) -> None:
        """Count one managed request of ``conversation`` and remember it as its last turn."""
        now = time.time() if now is None else now
        row = self._row(org, user, now)
        row[0] += 1
        row[1] += before
        row[2] += after
        if outcome in OUTCOMES:
            row[5 + OUTCOMES.index(outcome)] += 1
        self.turns[conversation] = Turn(org, public_id, before, after, now)

    def upstream(self, org: str, user: str | None, prompt_tokens: int, cached_tokens: int,
                 now: float | None = None, *, written: int = 0, spent: float = 0.0,
                 without: float = 0.0, lost: tuple[int, int] = (0, 0)) -> None:
        """Count what the upstream reported for one call, its money (US dollars) and the
        reasoning it lost (removed by a compaction, dropped by the provider)."""
        row = self._row(org, user, time.time() if now is None else now)
        row[_PROMPT] += prompt_tokens
        row[_CACHED] += cached_tokens
        row[_WRITTEN] += written
        row[_SPENT] += spent
        row[_SPENT + 1] += without
        row[_REMOVED] += lost[0]
        row[_REMOVED + 1] += lost[1]

    def shadowed(self, org: str, user: str | None, saved_tokens: int, saved_usd: float,
                 now: float | None = None) -> None:
        """Count one shadow-mode request and what the proxy would have saved on it."""
        row = self._row(org, user, time.time() if now is None else now)
        row[_SHADOW] += 1
        row[_SHADOW + 1] += saved_tokens
        row[_SHADOW + 2] += saved_usd

    def take(self) -> HourlyUsage:
        """Hand over what was counted and start afresh."""
        batch = HourlyUsage(self.rows, self.turns)
        self.rows, self.turns = {}, {}
        return batch

    def restore(self, batch: HourlyUsage) -> None:
        """Put back a batch whose write failed, for the next flush (newer turns win)."""
        for key, counts in batch.rows.items():
            row: list[float] = self.rows.setdefault(key, [0] * len(COUNTS))
            for i, n in enumerate(counts):
                row[i] += n
        for conversation, turn in batch.turns.items():
            self.turns.setdefault(conversation, turn)

    def write_rows(self, tx: Tx) -> None:
        """Add the batch's hours to ``usage_hourly``, in the caller's transaction ``tx``, in
        the order of their keys (so concurrent flushes lock rows in one order)."""
        names = ", ".join(COUNTS)
        add = ", ".join(f"{c} = usage_hourly.{c} + excluded.{c}" for c in COUNTS)
        sql = (f'INSERT INTO usage_hourly (org, "user", hour, {names}) VALUES (?, ?, ?, '
               f"{', '.join('?' * len(COUNTS))}) ON CONFLICT(org, \"user\", hour) "
               f"DO UPDATE SET {add}")
        for (org, user, hour), counts in sorted(self.rows.items(),
                                                key=lambda kv: (kv[0][0], kv[0][1] or "",
                                                                kv[0][2])):
            tx.execute(sql, [org, user, hour, *counts])

    def write_turn(self, tx: Tx, conversation: str) -> None:
        """Record the conversation's last turn of the batch (if it had one) on its row."""
        t = self.turns.get(conversation)
        if t is not None:
            tx.execute(
                "INSERT INTO conversations (id, org, created_at, updated_at, public_id, "
                "last_tokens_before, last_tokens_after) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET public_id = excluded.public_id, "
                "last_tokens_before = excluded.last_tokens_before, "
                "last_tokens_after = excluded.last_tokens_after, "
                "updated_at = CASE WHEN excluded.updated_at > COALESCE(conversations.updated_at, 0)"
                " THEN excluded.updated_at ELSE conversations.updated_at END",
                [conversation, t.org, t.at, t.at, t.public_id, t.before, t.after])
