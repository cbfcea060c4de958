"""Upstream usage counted in memory and written in batches, each batch exactly once.

What the upstream reported per conversation and model (table ``usage_totals``), per
organization, user and hour (``usage_hourly``) and each conversation's last turn are counted on
the request path without I/O and written every few seconds in one transaction (a busy
conversation does not cost a write per turn).

Every batch carries a random id, recorded in ``usage_batches`` by the transaction that applies
it. A write whose outcome is unknown (the connection broke while its COMMIT was on the way, or
the flush stopped waiting for it while it still ran) is kept with its id and offered again,
before newer figures, at the next flush; the store skips a batch whose id it already holds. So
an outage neither loses the figures nor counts them twice. A write that surely did not commit
is folded back into the figures of the next batch. The ids are kept for ``BATCH_IDS_KEPT_S``
(far beyond any outage a running process waits out).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.context.records.hourly import HourlyUsage
from proxy.store import StoreUnavailable, Tx
from proxy.store.base import CommitUnknown

TOTALS = ("requests", "prompt_tokens", "cached_tokens", "summary_calls",
          "summary_prompt_tokens", "summary_cached_tokens", "cache_write_tokens",
          "summary_cache_write_tokens", "cost_spent_usd", "cost_without_usd",
          "reasoning_removed", "reasoning_dropped")
_WRITTEN, _SPENT = TOTALS.index("cache_write_tokens"), TOTALS.index("cost_spent_usd")
_REMOVED = TOTALS.index("reasoning_removed")
BATCH_IDS_KEPT_S = 86_400.0

Key = tuple[str, str, str]  # (org, conversation, model)
Touch = Callable[[Tx, str, str], None]  # (tx, org, conversation): the conversation's row


@dataclass(eq=False)  # a batch is itself: two with the same figures are two batches
class Batch:
    """Figures counted between two flushes, under the id that makes their write idempotent."""

    totals: dict[Key, list[float]] = field(default_factory=dict)
    hourly: HourlyUsage = field(default_factory=HourlyUsage)
    id: str = field(default_factory=lambda: secrets.token_hex(16))

    def __bool__(self) -> bool:
        return bool(self.totals or self.hourly.rows or self.hourly.turns)

    def absorb(self, other: Batch) -> None:
        """Add ``other``'s figures to this batch's (its turns yield to newer ones here)."""
        for key, deltas in other.totals.items():
            row = self.totals.setdefault(key, [0] * len(TOTALS))
            for i, d in enumerate(deltas):
                row[i] += d
        self.hourly.restore(other.hourly)


def _unknown(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the write may have committed: its COMMIT
    lost its answer, or it still runs on its thread (the wait for it ended first: the store
    was found down meanwhile)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, CommitUnknown) or (
                isinstance(seen, StoreUnavailable) and seen.pending is not None):
            return True
        seen = seen.__cause__
    return False


class UsageBook:
    """The usage counted and not yet known to be written."""

    def __init__(self) -> None:
        self.current = Batch()
        self.hourly = self.current.hourly  # stays this object: ``take`` empties it in place
        self.unconfirmed: list[Batch] = []  # written with an unknown outcome, oldest first

    def add(self, key: Key, prompt_tokens: int, cached_tokens: int, *, written: int,
            summary: bool, spent: float, without: float, lost: tuple[int, int] = (0, 0)
            ) -> None:
        """Count one upstream call of a conversation (its hourly share is the caller's);
        ``lost``: the reasoning it lost, (removed by a compaction, dropped by the provider)."""
        row = self.current.totals.setdefault(key, [0] * len(TOTALS))
        at = 3 if summary else 0
        row[at] += 1
        row[at + 1] += prompt_tokens
        row[at + 2] += cached_tokens
        row[_WRITTEN + summary] += written
        row[_SPENT] += spent
        row[_SPENT + 1] += without
        row[_REMOVED] += lost[0]
        row[_REMOVED + 1] += lost[1]

    def take(self) -> list[Batch]:
        """The batches to write now: the unconfirmed ones, then what was counted since."""
        batches = list(self.unconfirmed)
        if self.current:
            totals, self.current.totals = self.current.totals, {}
            batches.append(Batch(totals, self.hourly.take()))
        return batches

    def failed(self, batches: list[Batch], error: BaseException) -> None:
        """Keep the batches of a failed write: a new one that may have committed stays whole
        under its id; one that surely did not is folded into the next."""
        unknown = _unknown(error)
        for batch in (b for b in batches if b not in self.unconfirmed):
            if unknown:
                self.unconfirmed.append(batch)
            else:  # counted since belongs with it: sums, and newer turns win
                self.current.absorb(batch)

    def written(self, batches: list[Batch]) -> None:
        """Forget the batches of a write that committed."""
        self.unconfirmed = [b for b in self.unconfirmed if b not in batches]

    def pending(self) -> int:
        """How many rows of usage are counted and not known to be written."""
        batches = [*self.unconfirmed, self.current]
        return sum(len(b.totals) + len(b.hourly.rows) for b in batches)

    def pending_totals(self, conversation: str) -> list[tuple[str, list[float]]]:
        """(model, deltas) of ``conversation`` not known to be written."""
        return [(model, deltas) for b in [*self.unconfirmed, self.current]
                for (_, conv, model), deltas in b.totals.items() if conv == conversation]


def write(tx: Tx, batches: list[Batch], touch: Touch, now: float | None = None) -> int:
    """Apply, in ``tx``, each batch the store does not already hold; return how many."""
    now = time.time() if now is None else now
    merged, applied = Batch(), 0
    for batch in reversed(batches):  # newest first: its last turns win (``absorb``)
        claim = tx.execute("INSERT INTO usage_batches (id, at) VALUES (?, ?) "
                           "ON CONFLICT(id) DO NOTHING", [batch.id, now])
        if claim.rowcount:
            merged.absorb(batch)
            applied += 1
    _apply(tx, merged, touch, now)
    return applied


def _apply(tx: Tx, batch: Batch, touch: Touch, now: float) -> None:
    # Rows are written in one global order (conversations by id, then the totals by key, then
    # the hours), so two replicas' flushes never wait on each other in a cycle: PostgreSQL
    # would otherwise end one of them as a deadlock.
    orgs = {conversation: org for org, conversation, _ in batch.totals}
    for conversation in sorted({*orgs, *batch.hourly.turns}):
        if conversation in orgs:
            touch(tx, orgs[conversation], conversation)
        batch.hourly.write_turn(tx, conversation)
    assignments = ", ".join(f"{c} = usage_totals.{c} + excluded.{c}" for c in TOTALS)
    for (_, conversation, model), deltas in sorted(batch.totals.items(),
                                                   key=lambda kv: (kv[0][1], kv[0][2])):
        tx.execute(
            f"INSERT INTO usage_totals (conversation, model, {', '.join(TOTALS)}, updated_at) "
            f"VALUES (?, ?, {', '.join('?' * len(TOTALS))}, ?) "
            f"ON CONFLICT(conversation, model) DO UPDATE SET {assignments}, "
            "updated_at = excluded.updated_at", [conversation, model, *deltas, now])
    batch.hourly.write_rows(tx)


def purge(tx: Tx, now: float | None = None) -> int:
    """Drop the batch ids older than ``BATCH_IDS_KEPT_S``; return how many."""
    now = time.time() if now is None else now
    return int(tx.execute("DELETE FROM usage_batches WHERE at <= ?",
                          [now - BATCH_IDS_KEPT_S]).rowcount)
