"""Per-conversation records: compactions (each one a divider), spills and upstream usage.

Reads for the request path are served from memory where they repeat every turn (the latest
compaction, the usage correction), loaded by ``refresh`` off the event loop; every write runs
on the store's writer thread. On a store that other processes share (PostgreSQL: replicas),
``refresh`` checks a conversation's cached view with one indexed read per request, since
another replica may have compacted it or recorded its usage since.

While the store is unreachable, what is cached stands and writes are queued (``.deferred``) and
written on its return; a compaction made meanwhile is acknowledged with its divider id.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from proxy.context.once import Once
from proxy.context.records.batches import TOTALS, UsageBook
from proxy.context.records.batches import purge as purge_batches
from proxy.context.records.batches import write as write_usage
from proxy.context.records.deferred import DeferredWrites, Lost, _no_count
from proxy.context.stages.mask import Spill
from proxy.store import Store, StoreUnavailable, Tx

DIVIDER_TEXT = {"auto": "Earlier messages were summarized to free up context",
                "manual": "Context summarized on request"}
_CACHE_LIMIT = 10_000
_SPILL_ID = re.compile(r"[0-9a-f]{16,64}")
_BY_PREFIX = ("SELECT * FROM compactions WHERE conversation = ? AND prefix_hash = ? "
              "AND covered = ? ORDER BY seq DESC LIMIT 1")
# The conversation's usage and newest compaction number, in one round trip.
_FRESH = ("SELECT usage_prompt_tokens, usage_estimate, "
          "(SELECT MAX(seq) FROM compactions WHERE conversation = ?) FROM conversations "
          "WHERE id = ?")
_JSON = ("preserved", "turns", "outputs")  # columns stored as JSON lists (migration 017)
_LATEST = "SELECT * FROM compactions WHERE conversation = ? ORDER BY seq DESC LIMIT 1"


@dataclass(frozen=True)
class CompactionRecord:
    """A stored compaction of a conversation's first ``covered`` messages (client indices)."""

    id: str
    conversation: str
    seq: int
    created_at: float
    kind: str  # auto | manual
    prefix_hash: str
    covered: int
    preserved: tuple[int, ...]
    summary: str
    summary_model: str
    summary_tokens: int
    tokens_before: int
    tokens_after: int
    status: str  # compacted | insufficient (still over the trigger after rewriting)
    truncated: bool = False  # a summary came back longer than asked and was cut
    reasoning_removed: int = 0  # turns it carried without their bound reasoning
    turns: tuple[int, ...] = ()  # the client's messages [first, end) its summary replaced
    outputs: tuple[dict[str, Any], ...] = ()  # tool outputs among them: tool, tokens, spill_id

    @property
    def text(self) -> str:
        return DIVIDER_TEXT[self.kind]

    def divider(self) -> dict[str, Any]:
        """The public divider record."""
        return {"id": self.id, "object": "conversation.divider", "created_at": self.created_at,
                "kind": self.kind, "text": self.text, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after, "covered_messages": self.covered,
                "summary_model": self.summary_model, "summary_tokens": self.summary_tokens,
                "truncated": self.truncated, "reasoning_removed": self.reasoning_removed,
                "covered_turns": list(self.turns), "tool_outputs": list(self.outputs)}


def _record(row: dict[str, Any]) -> CompactionRecord:
    fields: dict[str, Any] = {k: row[k] for k in CompactionRecord.__dataclass_fields__
                              if k not in _JSON and k != "truncated"}
    fields.update((k, tuple(json.loads(row[k] or "[]"))) for k in _JSON)
    return CompactionRecord(truncated=bool(row["truncated"]), **fields)


@dataclass
class Usage:
    prompt_tokens: int
    estimate: int


class Records:
    def __init__(self, store: Store, lost: Lost = _no_count) -> None:
        self.store = store
        self.deferred = DeferredWrites(store, lost)
        self._latest: OrderedDict[str, CompactionRecord | None] = OrderedDict()
        self._usage: OrderedDict[str, Usage | None] = OrderedDict()
        self._spilled: OrderedDict[tuple[str, str], None] = OrderedDict()
        # True: stored; False: the last read found it not stored (``ensure`` need not ask)
        self._known: OrderedDict[str, bool] = OrderedDict()
        self._refreshing, self._ensuring = Once(), Once()
        self.book = UsageBook()  # upstream usage not known to be written
        self.hourly = self.book.hourly  # per organization and hour; flushed with the totals
        self.shared = store.kind == "postgres"  # other processes may write the same rows

    @staticmethod
    def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > _CACHE_LIMIT:
            cache.popitem(last=False)

    # --- compactions ----------------------------------------------------------------------------

    def latest(self, conversation: str) -> CompactionRecord | None:
        """The conversation's newest compaction as cached (``refresh`` loads it)."""
        return self._latest.get(conversation)

    def is_fresh(self, conversation: str) -> bool:
        """Whether ``refresh`` has nothing to do: a store only this process writes, loaded."""
        return not self.shared and conversation in self._latest and conversation in self._usage

    async def refresh(self, conversation: str) -> None:
        """Load the conversation's latest compaction and usage into memory, up to date on a
        shared store (on SQLite, which only this process writes, once), reading off the loop;
        with the store unreachable, what is cached stands."""
        if self.is_fresh(conversation):
            return
        with contextlib.suppress(StoreUnavailable):  # managed from memory meanwhile
            # Concurrent requests of one conversation share one read.
            await self._refreshing.run(conversation, lambda: self._refresh(conversation))

    async def _refresh(self, conversation: str) -> None:
        row = await self.store.run(self.store.read_one, _FRESH, [conversation, conversation])
        if row is None:  # not stored yet: nothing another process made either
            self._remember(self._usage, conversation, None)
            self._remember(self._latest, conversation, None)
            if not self._known.get(conversation):
                self._remember(self._known, conversation, False)
            return
        usage = Usage(row[0], row[1]) if row[0] and row[1] else None
        self._remember(self._usage, conversation, usage)
        self._remember(self._known, conversation, True)  # stored: ``ensure`` has nothing to do
        cached = self._latest.get(conversation)
        if row[2] is None:
            if cached is None:  # (one made here while the row was read is kept)
                self._remember(self._latest, conversation, None)
        elif cached is None or cached.seq < row[2]:
            latest = await self.store.run(self.store.read_one, _LATEST, [conversation])
            if latest is not None:
                self.adopt(_record(dict(latest)))

    async def stored(self, conversation: str, phash: str, covered: int
                     ) -> CompactionRecord | None:
        """The newest stored compaction of that exact prefix (the latest, if newer), if any."""
        row = await self.store.run(self.store.read_one, _BY_PREFIX,
                                   [conversation, phash, covered])
        return self.adopt(_record(dict(row))) if row else None

    def stored_in(self, tx: Tx, conversation: str, phash: str, covered: int
                  ) -> CompactionRecord | None:
        """``stored``, read in the caller's transaction (on any thread: caches nothing)."""
        row = tx.execute(_BY_PREFIX, [conversation, phash, covered]).fetchone()
        return _record(dict(row)) if row else None

    def adopt(self, rec: CompactionRecord) -> CompactionRecord:
        """Cache ``rec`` as the conversation's latest unless a newer one is known."""
        latest = self._latest.get(rec.conversation)
        if latest is None or latest.seq < rec.seq:
            self._remember(self._latest, rec.conversation, rec)
        return rec

    def dividers(self, conversation: str) -> list[dict[str, Any]]:
        rows = self.store.read(
            "SELECT * FROM compactions WHERE conversation = ? ORDER BY seq", [conversation])
        return [_record(dict(r)).divider() for r in rows]

    def exists(self, conversation: str) -> bool:
        return bool(self._known.get(conversation)) or self.store.read_one(
            "SELECT 1 FROM conversations WHERE id = ?", [conversation]) is not None

    def is_known(self, conversation: str) -> bool:
        """Whether the conversation is known to be stored (``ensure`` has nothing to do)."""
        return self._known.get(conversation) is True

    async def ensure(self, org: str, conversation: str) -> None:
        """Record that the conversation exists (once per process, not once per turn, and once
        for requests of a new conversation that arrive together)."""
        if not self._known.get(conversation):
            await self._ensuring.run(conversation, lambda: self._ensure(org, conversation))

    async def _ensure(self, org: str, conversation: str) -> None:
        known = self._known.get(conversation)
        if known:  # found while this caller waited for another's run
            return
        if known is None:  # (False: the read that just found it absent stands)
            try:
                known = await self.store.run(self.exists, conversation)
            except StoreUnavailable:
                known = False
        if not known:  # an upsert: one another process wrote meanwhile stays as it is
            await self.deferred.write("conversation", self._touch, org, conversation)
        self._remember(self._known, conversation, True)

    async def add_compaction(self, org: str, conversation: str, **values: Any
                             ) -> CompactionRecord:
        """Store a compaction (and its divider); the newest becomes the conversation's latest.
        Its number is allocated inside the write transaction, so compactions of one
        conversation made at once (each of its own prefix) are numbered one after the other."""
        made = time.time()
        div_id = "div_" + secrets.token_hex(8)

        def write(tx: Tx) -> CompactionRecord | None:
            tx.lock(f"conversation {conversation}")  # replicas number one at a time
            if tx.execute("SELECT 1 FROM compactions WHERE id = ?", [div_id]).fetchone():
                return None  # written already (a queued write replayed after a late commit)
            return self.insert_compaction(tx, org, conversation, div_id, made, **values)

        try:
            rec = await self.store.write(write)
        except StoreUnavailable as e:  # acknowledged now, numbered in the store on its return
            self.deferred.unavailable(e, "divider", write, ())
            latest = self._latest.get(conversation)
            rec = CompactionRecord(id=div_id, conversation=conversation, created_at=made,
                                   seq=(latest.seq if latest else 0) + 1, **values)
        assert rec is not None  # a first write of a fresh id always inserts
        return self.adopt(rec)

    def insert_compaction(self, tx: Tx, org: str, conversation: str, div_id: str,
                          made: float, **values: Any) -> CompactionRecord:
        """Store a compaction in the caller's transaction, which holds the conversation's
        lock (on any thread: caches nothing)."""
        self._touch(tx, org, conversation)
        row = tx.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM compactions WHERE conversation = ?",
            [conversation]).fetchone()
        rec = CompactionRecord(id=div_id, conversation=conversation, seq=int(row[0]),
                               created_at=made, **values)
        stored = asdict(rec)
        for k in _JSON:
            stored[k] = json.dumps(list(stored[k]))
        stored["truncated"] = int(rec.truncated)
        tx.execute(f"INSERT INTO compactions ({', '.join(stored)}) "
                   f"VALUES ({', '.join('?' * len(stored))})", list(stored.values()))
        return rec

    @staticmethod
    def _touch(tx: Tx, org: str, conversation: str) -> None:
        now = time.time()
        tx.execute(
            "INSERT INTO conversations (id, org, created_at, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at",
            [conversation, org, now, now])

    # --- spills ---------------------------------------------------------------------------------

    async def add_spills(self, org: str, conversation: str, spills: list[Spill],
                         retention_days: float) -> None:
        """Store masked originals once each (content-addressed; repeats are skipped)."""
        fresh = [s for s in spills if (conversation, s.id) not in self._spilled]
        if not fresh:
            return
        now = time.time()
        rows = [{"conversation": conversation, "id": s.id, "tool_name": s.tool_name,
                 "tool_call_id": s.tool_call_id,
                 "content": s.content if isinstance(s.content, str) else json.dumps(s.content),
                 "tokens": s.tokens, "created_at": now,
                 "expires_at": now + retention_days * 86400} for s in fresh]

        def write(tx: Tx) -> None:
            self._touch(tx, org, conversation)
            for row in rows:
                tx.execute(f"INSERT INTO spills ({', '.join(row)}) VALUES "
                           f"({', '.join('?' * len(row))}) ON CONFLICT DO NOTHING",
                           list(row.values()))

        await self.deferred.write("spills", write)
        for s in fresh:
            self._remember(self._spilled, (conversation, s.id), None)

    def spill(self, conversation: str, spill_id: str) -> dict[str, Any] | None:
        """A retained spill of the conversation by its id, or by the first 16 or more hex
        digits of it as a placeholder shows them."""
        if not _SPILL_ID.fullmatch(spill_id):
            return None
        # Ids are lowercase hex: every id starting with the prefix sorts in [prefix, prefix~).
        row = self.store.read_one(
            "SELECT * FROM spills WHERE conversation = ? AND id >= ? AND id < ? "
            "AND expires_at > ? ORDER BY id LIMIT 1",
            [conversation, spill_id, spill_id + "~", time.time()])
        if row is None:
            return None
        return {"id": row["id"], "object": "conversation.spill", "tool_name": row["tool_name"],
                "tool_call_id": row["tool_call_id"], "tokens": row["tokens"],
                "created_at": row["created_at"], "expires_at": row["expires_at"],
                "content": row["content"]}

    async def purge_expired(self) -> int:
        """Drop the spills past their expiry (and the old usage batch ids); return how many
        spills."""
        def write(tx: Tx) -> int:
            purge_batches(tx)
            return int(tx.execute("DELETE FROM spills WHERE expires_at <= ?",
                                  [time.time()]).rowcount)

        return await self.store.write(write, deadline=None)

    # --- usage ----------------------------------------------------------------------------------

    def usage(self, conversation: str) -> Usage | None:
        """The conversation's usage correction as cached (``refresh`` loads it)."""
        return self._usage.get(conversation)

    async def record_usage(self, org: str, conversation: str, prompt_tokens: int,
                           estimate: int) -> None:
        """Remember what the upstream said the last prompt cost against what we estimated."""
        self._remember(self._usage, conversation, Usage(prompt_tokens, estimate))

        def write(tx: Tx) -> None:
            self._touch(tx, org, conversation)
            tx.execute("UPDATE conversations SET usage_prompt_tokens = ?, usage_estimate = ? "
                       "WHERE id = ?", [prompt_tokens, estimate, conversation])

        await self.deferred.write("usage correction", write)

    # --- what the upstream reported (prompt cache accounting) ---------------------------------

    def add_upstream_usage(self, org: str, conversation: str, model: str, prompt_tokens: int,
                           cached_tokens: int, *, written: int = 0, summary: bool = False,
                           user: str | None = None, spent: float = 0.0,
                           without: float = 0.0, lost: tuple[int, int] = (0, 0)) -> None:
        """Count one upstream call of the conversation (``written``: the tokens it stored in
        the prompt cache; ``spent`` and ``without``: its money in US dollars, upstream and
        without the proxy); written by ``flush_usage`` (in batches, so a busy conversation does
        not cost a disk write per turn)."""
        self.hourly.upstream(org, user, prompt_tokens, cached_tokens, written=written,
                             spent=spent, without=without, lost=lost)
        self.book.add((org, conversation, model), prompt_tokens, cached_tokens,
                      written=written, summary=summary, spent=spent, without=without, lost=lost)

    async def flush_usage(self) -> None:
        """Write the usage counted since the last flush (and any batch whose write had an
        unknown outcome), in one transaction: each batch exactly once."""
        batches = self.book.take()
        if not batches:
            return
        try:  # background work: no deadline, the outcome decides whether figures are kept
            await self.store.write_aside(write_usage, batches, self._touch)
        except BaseException as e:
            self.book.failed(batches, e)
            raise
        self.book.written(batches)

    def pending_usage(self) -> int:
        """How many conversation and model rows of usage are counted but not written."""
        return self.book.pending()

    def usage_totals(self, conversation: str) -> dict[str, dict[str, float]]:
        """Model -> the conversation's totals (written and pending; money in US dollars)."""
        rows = self.store.read(
            f"SELECT model, {', '.join(TOTALS)} FROM usage_totals WHERE conversation = ?",
            [conversation])
        out = {r[0]: dict(zip(TOTALS, r[1:], strict=True)) for r in rows}
        for model, deltas in self.book.pending_totals(conversation):
            row = out.setdefault(model, dict.fromkeys(TOTALS, 0.0))
            for name, d in zip(TOTALS, deltas, strict=True):
                row[name] += d
        return out
