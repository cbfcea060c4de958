"""Single flight across processes (SPEC sections 5 and 9): one summary per conversation and
prefix, however many replicas receive its requests at once.

Within a process, concurrent requests share one future (``SummarySource``); across processes
the one that makes the summary holds a lease named after the conversation and prefix hash
(``proxy.store.leases``), renewed while it works. ``claim`` runs in one write transaction under
the conversation's lock: a compaction of that prefix already stored is returned for reuse,
else the lease is taken, else another process holds it. A process that finds it held waits
for the stored result (``wait``) within the summary timeout, then fails open; one whose
holder died stops waiting when the lease runs out, and the next request of that prefix claims
it again.

While the store is unreachable no lease can be taken: the process makes the summary itself
(single flight within the process still holds), and a waiting process stops waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from proxy.context.records.compactions import CompactionRecord, Records
from proxy.store import StoreUnavailable, Tx, leases

log = logging.getLogger("context_proxy.context")

LEASE_S = 4.0  # how long a dead holder blocks its prefix (a live one renews every second)
RENEW_EVERY_S = 1.0
POLL_S = 0.05  # how often a waiting process looks for the stored result


@dataclass(frozen=True)
class Claim:
    """What ``claim`` found: the stored compaction of the prefix (reuse it), or whether this
    process now holds the lease (make it) or another does (wait)."""

    stored: CompactionRecord | None
    holder: bool
    leased: bool = True  # False: made without a lease (the store could not be asked)


def lease_name(conversation: str, phash: str) -> str:
    return f"compaction {conversation} {phash}"


class Flights:
    def __init__(self, records: Records, owner: str = leases.OWNER) -> None:
        self.records = records
        self.store = records.store
        self.owner = owner
        self._releasing: set[asyncio.Task[None]] = set()  # releases the answer does not wait for

    async def claim(self, conversation: str, phash: str, covered: int) -> Claim:
        def write(tx: Tx) -> Claim:
            tx.lock(f"conversation {conversation}")  # the lock add_compaction numbers under
            stored = self.records.stored_in(tx, conversation, phash, covered)
            if stored is not None:
                return Claim(stored, False)
            name = lease_name(conversation, phash)
            return Claim(None, leases.claim(tx, name, LEASE_S, self.owner))

        # Under the store's own deadline: past it the summary is made here without a lease (a
        # second summary of the prefix elsewhere is the price of not holding up the request).
        try:
            found = await self.store.write(write)
        except StoreUnavailable:
            return Claim(None, True, leased=False)
        if found.stored is not None:
            self.records.adopt(found.stored)
        return found

    def holding(self, conversation: str, phash: str, leased: bool = True
                ) -> contextlib.AbstractAsyncContextManager[None]:
        """Keep the claimed lease of the prefix alive for the body's duration (``hold``)."""
        return self.hold(lease_name(conversation, phash), leased)

    @contextlib.asynccontextmanager
    async def hold(self, name: str, leased: bool = True) -> AsyncIterator[None]:
        """Keep the claimed lease ``name`` alive for the body's duration, then release it (a
        release that fails leaves it to run out). Without a lease, nothing to keep."""
        if not leased:
            yield
            return

        async def renew() -> None:
            while True:
                await asyncio.sleep(RENEW_EVERY_S)
                try:
                    await self.store.write(leases.renew, name, LEASE_S, self.owner)
                except Exception as e:  # the next beat tries again; the lease has slack
                    log.warning("renewing a compaction lease failed: %s", e)

        beat = asyncio.create_task(renew())
        try:
            yield
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            if self.store.late:  # the store was slow for this request: it does not wait again
                task = asyncio.create_task(self._release(name))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)
            else:
                await self._release(name)

    async def _release(self, name: str) -> None:
        """Release the lease ``name`` (one that fails runs out)."""
        try:
            await self.store.write(leases.release, name, self.owner, always=True)
        except Exception as e:
            log.warning("releasing a compaction lease failed (it runs out): %s", e)

    async def wait(self, conversation: str, phash: str, covered: int, timeout_s: float
                   ) -> CompactionRecord | None:
        """The compaction another process is making, once stored; None when it gave up (its
        lease is gone with nothing stored) or ``timeout_s`` passed."""
        name = lease_name(conversation, phash)
        deadline = time.monotonic() + timeout_s
        while True:
            # The lease first: a holder stores its compaction before it releases, so a lease
            # seen gone and then no row means it stored none.
            try:
                busy = await self.store.run(leases.held, self.store, name)
                stored = await self.records.stored(conversation, phash, covered)
            except StoreUnavailable:
                return None  # fail open: the request goes on without the summary
            if stored is not None:
                return stored
            if not busy or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_S)
