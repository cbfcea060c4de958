"""Summaries prepared in the background, in the store (SPEC section 5, "Background preparation").

A conversation has at most one prepared summary not yet applied: the summary a compaction of
its first ``covered`` messages (client indices, keyed by their prefix hash) makes, keeping
``preserved`` verbatim. It is written whole, in one transaction, once made: a process killed
while preparing leaves nothing behind but its lease, which runs out. Applying it stores the
compaction (the divider, kind ``auto``) and drops the prepared row in one transaction under the
conversation's lock, so replicas that apply it at the same moment make one divider: the first
stores it, the others find it stored and reuse it. One preparation per conversation at a time,
across replicas: the lease ``prepare <conversation>``.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from proxy.context.records.compactions import CompactionRecord, Records
from proxy.store import StoreUnavailable, Tx, leases

LEASE_S = 4.0  # as a compaction's lease: a live holder renews it every second


@dataclass(frozen=True)
class PreparedSummary:
    """A prepared summary of a conversation's first ``covered`` messages; read by the planner
    as a stored compaction would be (``proxy.context.stages.plan.Prior``)."""

    conversation: str
    prefix_hash: str
    covered: int
    preserved: tuple[int, ...]
    summary: str
    summary_model: str
    summary_tokens: int
    truncated: bool = False
    created_at: float = 0.0

    @property
    def status(self) -> str:
        return "compacted"  # a summary without gain is never stored


@dataclass(frozen=True)
class PrepareClaim:
    """What ``claim`` found: whether this process now holds the conversation's preparation
    lease, the prepared summary already stored (if any) and the conversation's newest
    compaction number (0: none), by which a preparation planned on an older view is stale."""

    holder: bool
    existing: PreparedSummary | None
    newest_seq: int


def lease_name(conversation: str) -> str:
    return f"prepare {conversation}"


_SELECT = "SELECT * FROM prepared_summaries WHERE conversation = ?"
_COLUMNS = ("conversation", "prefix_hash", "covered", "preserved", "summary", "summary_model",
            "summary_tokens", "truncated", "created_at")


def _prepared(row: Any) -> PreparedSummary:
    values = {k: row[k] for k in _COLUMNS}
    return PreparedSummary(**{**values, "preserved": tuple(json.loads(values["preserved"])),
                              "truncated": bool(values["truncated"])})


class PreparedStore:
    def __init__(self, records: Records, owner: str = leases.OWNER) -> None:
        self.records = records
        self.store = records.store
        self.owner = owner

    async def load(self, conversation: str) -> PreparedSummary | None:
        """The conversation's prepared summary (read on a reader thread); None while the store
        is unreachable too: the request then goes on as if none had been prepared."""
        try:
            row = await self.store.run(self.store.read_one, _SELECT, [conversation])
        except StoreUnavailable:
            return None
        return _prepared(row) if row else None

    async def claim(self, conversation: str) -> PrepareClaim:
        def write(tx: Tx) -> PrepareClaim:
            tx.lock(f"conversation {conversation}")
            row = tx.execute(_SELECT, [conversation]).fetchone()
            seq = tx.execute("SELECT MAX(seq) FROM compactions WHERE conversation = ?",
                             [conversation]).fetchone()
            holder = leases.claim(tx, lease_name(conversation), LEASE_S, self.owner)
            return PrepareClaim(holder, _prepared(row) if row else None, int(seq[0] or 0))

        return await self.store.write(write)

    async def put(self, org: str, prep: PreparedSummary) -> bool:
        """Store ``prep`` as the conversation's prepared summary; True when it replaced one
        that was never applied."""
        values = {k: getattr(prep, k) for k in _COLUMNS}
        values["preserved"] = json.dumps(list(prep.preserved))
        values["truncated"] = int(prep.truncated)

        def write(tx: Tx) -> bool:
            tx.lock(f"conversation {prep.conversation}")
            self.records._touch(tx, org, prep.conversation)
            gone = tx.execute("DELETE FROM prepared_summaries WHERE conversation = ?",
                              [prep.conversation]).rowcount
            tx.execute(f"INSERT INTO prepared_summaries ({', '.join(values)}) "
                       f"VALUES ({', '.join('?' * len(values))})", list(values.values()))
            return int(gone) > 0

        return await self.store.write(write)

    async def apply(self, org: str, prep: PreparedSummary, tokens_before: int,
                    tokens_after: int) -> tuple[CompactionRecord, bool]:
        """Store ``prep`` as the conversation's compaction (kind ``auto``): (the record, True)
        when this call stored it, (the one stored, False) when another request did first."""
        def write(tx: Tx) -> tuple[CompactionRecord, bool]:
            tx.lock(f"conversation {prep.conversation}")
            stored = self.records.stored_in(tx, prep.conversation, prep.prefix_hash,
                                            prep.covered)
            if stored is not None:
                return stored, False
            rec = self.records.insert_compaction(
                tx, org, prep.conversation, "div_" + secrets.token_hex(8), time.time(),
                kind="auto", prefix_hash=prep.prefix_hash,
                covered=prep.covered, preserved=prep.preserved, summary=prep.summary,
                summary_model=prep.summary_model, summary_tokens=prep.summary_tokens,
                tokens_before=tokens_before, tokens_after=tokens_after, status="compacted",
                truncated=prep.truncated)
            self._drop(tx, prep)
            return rec, True

        rec, made = await self.store.write(write)
        return self.records.adopt(rec), made

    async def discard(self, prep: PreparedSummary) -> bool:
        """Drop ``prep`` (it no longer fits the conversation); True when it was still there
        (False too while the store is unreachable: the next preparation replaces it)."""
        try:
            return await self.store.write(self._drop, prep)
        except StoreUnavailable:
            return False

    @staticmethod
    def _drop(tx: Tx, prep: PreparedSummary) -> bool:
        return int(tx.execute(
            "DELETE FROM prepared_summaries WHERE conversation = ? AND prefix_hash = ? "
            "AND covered = ?", [prep.conversation, prep.prefix_hash, prep.covered]).rowcount) > 0


def made_now(conversation: str, prefix: str, covered: int, preserved: tuple[int, ...],
             summary: str, model: str, tokens: int, truncated: bool) -> PreparedSummary:
    """A prepared summary made just now."""
    return PreparedSummary(conversation, prefix, covered, preserved, summary, model, tokens,
                           truncated, time.time())
