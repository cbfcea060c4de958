"""Whether the store answers, and the gate that keeps the event loop from waiting on it.

Every async store call (``Store.run``, ``Store.write``) runs in a worker thread under a
deadline. The store is marked down on evidence that it is gone, not merely slow:

- a call that fails as unreachable (a refused or broken connection, on the retry too) marks it
  down at once;
- a call that outlives its deadline only makes it suspect: a verdict probe (a new connection's
  ``SELECT 1``) runs, and the store is marked down when that probe fails, or has no answer
  within ``VERDICT_S`` while no other call answered either. A store that is slow but alive (a
  starved machine) keeps answering some calls, and stays up.

While down, calls fail at once with ``StoreUnavailable`` (no thread, no wait) and the calls
still waiting are released; probes ping the database from threads of their own, one new probe
every ``PROBE_EVERY_S`` at most, and the first that answers marks it up again. So an outage
costs the requests that find it at most a deadline each, the ones after it nothing, and the
store's return needs no restart. One WARNING line when it goes down, one INFO line when it
comes back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("context_proxy.store")

PROBE_EVERY_S = 0.25  # while down, how often the database is asked whether it answers again
PROBES = 12  # a probe sent into a partition hangs for the connect timeout (2 s)
# After a late call: how long a verdict probe may go unanswered, with no other call answering
# either, before the store counts as down. With the 0.4 s deadline, a silent partition is
# declared within 0.9 s of the first call it swallowed.
VERDICT_S = 0.5
VERDICT_TICK_S = 0.05  # how often a verdict looks whether another call answered meanwhile
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
        self.answered_at = float("-inf")  # monotonic: the last call that answered
        self.verdicts = 0  # late calls judged (how many suspicions a probe settled)
        self._probe: asyncio.Task[None] | None = None
        self._verdict: asyncio.Task[None] | None = None
        self._gone: asyncio.Future[None] | None = None
        self._executor = ThreadPoolExecutor(thread_name_prefix="store-probe",
                                            max_workers=PROBES)
        self._listeners: list[Callable[[bool], None]] = []
        self._back_at = float("-inf")

    def listen(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(up)`` on the loop's thread each time the store goes down or comes back."""
        self._listeners.append(fn)

    def gone(self) -> asyncio.Future[None]:
        """A future that completes when the store is next marked down: a call waiting on the
        store stops waiting then (it would fail anyway)."""
        if self._gone is None or self._gone.done():
            self._gone = asyncio.get_running_loop().create_future()
        return self._gone

    def answered(self) -> None:
        """A call got its answer: the store is alive, whatever a verdict is waiting for."""
        self.answered_at = time.monotonic()

    def late(self, why: str) -> None:
        """A call outlived its deadline: suspect the store, and let a probe judge (one verdict
        at a time; none while the store is already down)."""
        if not self.up or (self._verdict is not None and not self._verdict.done()):
            return
        self.verdicts += 1
        self._verdict = asyncio.get_running_loop().create_task(
            self._judge(why, time.monotonic()))

    async def _judge(self, why: str, since: float) -> None:
        loop = asyncio.get_running_loop()
        probe = asyncio.wrap_future(self._executor.submit(self._ping), loop=loop)
        probe.add_done_callback(_consume)
        until = since + VERDICT_S
        while self.up and self.answered_at <= since:
            if probe.done():
                error = probe.exception()
                if error is not None:
                    self.failed(f"{why}; a probe failed: {type(error).__name__}")
                return  # the probe answered: slow, not down
            left = until - time.monotonic()
            if left <= 0:
                self.failed(f"{why}; a probe had no answer in {VERDICT_S} s")
                return
            await asyncio.wait({probe}, timeout=min(left, VERDICT_TICK_S))
        log.debug("a store call was late (%s), but the store answers: not an outage", why)

    def failed(self, why: str) -> None:
        """The store is unreachable: mark it down (once), release the waiting calls and start
        probing."""
        if self.up:
            self.up, self.down_since = False, time.monotonic()
            self.outages += 1
            said = log.debug if time.monotonic() - self._back_at < SAME_OUTAGE_S else log.warning
            said("the store is unreachable (%s): serving recently seen keys from memory, "
                 "writes are queued until it answers again", why)
            if self._gone is not None and not self._gone.done():
                self._gone.set_result(None)
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
        # Probes overlap (at most PROBES at once): one that went out into a partition may hang
        # for its connect timeout, and the return must be seen within a probe period, not a
        # timeout. A new probe starts every PROBE_EVERY_S at most, however fast they fail (a
        # refused port fails each at once: unpaced, they would spin a core).
        loop = asyncio.get_running_loop()
        running: set[asyncio.Future[None]] = set()
        next_at = time.monotonic()
        while not self.up:
            now = time.monotonic()
            if len(running) < PROBES and now >= next_at:
                probe = asyncio.wrap_future(self._executor.submit(self._ping), loop=loop)
                probe.add_done_callback(_consume)
                running.add(probe)
                next_at = now + PROBE_EVERY_S
            wait_s = max(0.0, next_at - time.monotonic())
            if not running:
                await asyncio.sleep(wait_s)
                continue
            done, _ = await asyncio.wait(running, timeout=wait_s or PROBE_EVERY_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            running -= done
            if any(f.exception() is None for f in done):
                self._recovered()

    async def close(self, *, wait: bool = False) -> None:
        """Stop probing; with ``wait``, once no probe is still running in its thread (a
        connection must not be closed under a probe that is using it)."""
        for task in (self._probe, self._verdict):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if wait:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        else:
            self._executor.shutdown(wait=False, cancel_futures=True)
