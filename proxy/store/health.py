"""Whether the store answers, and the gate that keeps the event loop from waiting on it.

Every async store call (``Store.run``, ``Store.write``) runs in a worker thread under a
deadline. A call that fails as unreachable, or outlives its deadline, marks the store down:
from then on calls fail at once with ``StoreUnavailable`` (no thread, no wait) while one probe
at a time pings the database in a thread of its own, every ``PROBE_EVERY_S``; the first probe
that answers marks it up again. So an outage costs the request that finds it one deadline, the
ones after it nothing, and the store's return needs no restart. One WARNING line when it goes
down, one INFO line when it comes back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("context_proxy.store")

PROBE_EVERY_S = 0.25  # while down, how often the database is asked whether it answers again
PROBES = 4
# Down again this soon after coming back: the same outage, not a new one worth two more lines.
SAME_OUTAGE_S = 10.0


def _consume(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class StoreHealth:
    """The store's up/down state, for this process (read on the event loop's thread)."""

    def __init__(self, ping: Callable[[], None]) -> None:
        self._ping = ping
        self.up = True
        self.down_since: float | None = None
        self.outages = 0
        self._probe: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(thread_name_prefix="store-probe",
                                            max_workers=PROBES)
        self._listeners: list[Callable[[bool], None]] = []
        self._back_at = float("-inf")

    def listen(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(up)`` on the loop's thread each time the store goes down or comes back."""
        self._listeners.append(fn)

    def failed(self, why: str) -> None:
        """A call found the store unreachable: mark it down (once) and start probing."""
        if self.up:
            self.up, self.down_since = False, time.monotonic()
            self.outages += 1
            said = log.debug if time.monotonic() - self._back_at < SAME_OUTAGE_S else log.warning
            said("the store is unreachable (%s): serving recently seen keys from memory, "
                 "writes are queued until it answers again", why)
            self._notify(False)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())

    def _recovered(self) -> None:
        if self.up:
            return
        took = time.monotonic() - (self.down_since or time.monotonic())
        said = log.debug if time.monotonic() - self._back_at < SAME_OUTAGE_S else log.info
        self.up, self.down_since, self._back_at = True, None, time.monotonic()
        said("the store answers again after %.1f s; writing what was queued", took)
        self._notify(True)

    def _notify(self, up: bool) -> None:
        for fn in self._listeners:
            try:
                fn(up)
            except Exception:  # a listener's fault must not stop the others
                log.exception("store health listener failed")

    async def _probe_until_up(self) -> None:
        # Probes overlap (a new one every PROBE_EVERY_S, at most PROBES at once): one that
        # went out into the outage may hang for its connect timeout, and the return must be
        # seen within a probe period, not a timeout. Each is bounded in its own thread.
        loop = asyncio.get_running_loop()
        running: set[asyncio.Future[None]] = set()
        while not self.up:
            if len(running) < PROBES:
                probe = asyncio.wrap_future(self._executor.submit(self._ping), loop=loop)
                probe.add_done_callback(_consume)
                running.add(probe)
            done, _ = await asyncio.wait(running, timeout=PROBE_EVERY_S)
            running -= done
            if any(f.exception() is None for f in done):
                self._recovered()

    async def close(self, *, wait: bool = False) -> None:
        """Stop probing; with ``wait``, once no probe is still running in its thread (a
        connection must not be closed under a probe that is using it)."""
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        if wait:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        else:
            self._executor.shutdown(wait=False, cancel_futures=True)
