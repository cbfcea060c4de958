"""Writes the store could not take: kept in order and written when it answers again.

A request's write (a divider, spills, the usage correction, the conversation's row) that fails
because the store is unreachable, or outlives its deadline and then fails, is queued here
instead of failing the request; ``drain`` writes the queue in order once the store is back
(every queued write is idempotent: upserts, inserts that skip rows already there). Past
``LIMIT`` queued writes the oldest are dropped and counted as lost, never silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from proxy.store import Store, StoreUnavailable

log = logging.getLogger("context_proxy.store")

LIMIT = 50_000

Lost = Callable[[str, int], None]  # (what, how many): the metric of writes given up


def _no_count(what: str, n: int) -> None:
    """Without metrics (the CLI, tests of Records alone) lost writes are only logged."""


class DeferredWrites:
    def __init__(self, store: Store, lost: Lost = _no_count) -> None:
        self.store = store
        self.lost = lost
        self._queue: deque[tuple[str, Callable[..., Any], tuple[Any, ...]]] = deque()
        self._draining: asyncio.Task[None] | None = None
        store.health.listen(self._on_health)

    def __len__(self) -> int:
        return len(self._queue)

    async def write(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        """``store.write(fn, *args)``; True when it committed, False when the store could not
        take it now and it was queued (or is still running past its deadline, and is queued
        should it fail)."""
        try:
            await self.store.write(fn, *args)
            return True
        except StoreUnavailable as e:
            self.unavailable(e, what, fn, args)
            return False

    def unavailable(self, e: StoreUnavailable, what: str, fn: Callable[..., Any],
                    args: tuple[Any, ...]) -> None:
        """Queue the write ``e`` refused; one still running past its deadline only if it
        fails in the end (it may yet commit)."""
        if e.pending is None:
            self.add(what, fn, args)
            return
        loop = asyncio.get_running_loop()
        e.pending.add_done_callback(
            lambda f: loop.call_soon_threadsafe(self._settle, f, what, fn, args))

    def _settle(self, done: Future[Any], what: str, fn: Callable[..., Any],
                args: tuple[Any, ...]) -> None:
        if done.cancelled() or done.exception() is not None:
            self.add(what, fn, args)

    def add(self, what: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._queue.append((what, fn, args))
        if len(self._queue) > LIMIT:
            dropped, _, _ = self._queue.popleft()
            log.warning("store writes queued past %d: the oldest (%s) is lost", LIMIT, dropped)
            self.lost(dropped, 1)
        if self.store.up:  # failed on its own (not an outage): try again soon
            self._start_drain()

    def _on_health(self, up: bool) -> None:
        if up:
            self._start_drain()

    def _start_drain(self) -> None:
        if self._queue and (self._draining is None or self._draining.done()):
            self._draining = asyncio.get_running_loop().create_task(self.drain())

    async def drain(self) -> None:
        """Write the queue in order; stop (keeping the rest) at the first write that fails."""
        written = 0
        while self._queue:
            what, fn, args = self._queue[0]
            try:
                await self.store.write_aside(fn, *args)
            except StoreUnavailable:
                break
            except Exception:  # a write that can never succeed must not block the rest
                log.exception("a queued store write (%s) failed: it is lost", what)
                self.lost(what, 1)
            self._queue.popleft()
            written += 1
        if written:
            log.info("wrote %d queued store write(s); %d left", written, len(self._queue))

    def give_up(self) -> None:
        """At shutdown: count what is still queued as lost."""
        counts: dict[str, int] = {}
        for what, _, _ in self._queue:
            counts[what] = counts.get(what, 0) + 1
        for what, n in counts.items():
            log.warning("%d queued store write(s) of %s are lost at shutdown", n, what)
            self.lost(what, n)
        self._queue.clear()
