"""Single flight within the process: concurrent callers of one key share one run of the work.

The first request of a conversation reads and writes its records in worker threads; when a
client sends several requests of a new conversation at once, each would otherwise make the
same reads and writes, and every hop to a worker thread costs the loop about 100 us of CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Once:
    """``run(key, work)``: the work runs once for every caller that arrives while it runs."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[bool]] = {}

    async def run(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work()``, or wait for the run under way for ``key``. A caller whose shared run
        did not finish (it raised, or its request was cancelled) runs the work itself, so each
        caller returns only after a run that completed or raises that run's error."""
        running = self._running.get(key)
        if running is not None:
            if await asyncio.shield(running):
                return
            await work()
            return
        done = asyncio.get_running_loop().create_future()
        self._running[key] = done
        ok = False
        try:
            await work()
            ok = True
        finally:
            del self._running[key]
            done.set_result(ok)
