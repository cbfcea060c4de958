"""``serve``'s one INFO line at shutdown: how many requests were in flight when it began (what
was drained), how many were still open when the grace ended, and how long it all took."""

from __future__ import annotations

import logging
import time

from aiohttp import web

from proxy.state import STATE

log = logging.getLogger("context_proxy")


def in_flight(app: web.Application) -> int:
    """Requests being answered now, all routes (the ``context_proxy_requests_in_flight``
    gauge's sum)."""
    state = app.get(STATE)
    if state is None:
        return 0
    return int(sum(s.value for m in state.metrics.in_flight.collect() for s in m.samples))


def install(app: web.Application) -> None:
    # Kept beside the hooks, not in the app: a started application's state is frozen.
    began_at: list[tuple[float, int]] = []

    async def began(app: web.Application) -> None:
        began_at.append((time.perf_counter(), in_flight(app)))

    async def ended(app: web.Application) -> None:
        started, open_then = began_at[-1] if began_at else (time.perf_counter(), 0)
        left = in_flight(app)
        log.info("shut down in %.2f s: drained %d request(s) in flight (%d finished, %d cut "
                 "at the end of the grace)", time.perf_counter() - started, open_then,
                 max(0, open_then - left), left)

    app.on_shutdown.append(began)
    app.on_cleanup.append(ended)
