"""Operator endpoints: ``/healthz``, ``/readyz`` and ``/metrics`` (SPEC section 9)."""

from __future__ import annotations

from aiohttp import web

from proxy.metrics import CONTENT_TYPE
from proxy.state import STATE

READY_DEADLINE_S = 1.5  # /readyz says "unavailable" within 2 s, however the store hangs


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers. Never touches the store (an outage is not a reason to
    restart a process that serves from memory through it)."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:  # a store known to be down answers at once (the gate), else one ping, bounded
        await state.store.run(state.store.ping, deadline=READY_DEADLINE_S, patience=0)
    except Exception as e:  # the database is the only local dependency
        return web.json_response({"status": "unavailable", "reason": type(e).__name__},
                                 status=503)
    return web.json_response({"status": "ready"})


async def metrics_view(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/readyz", readyz, name="readyz")
    app.router.add_get("/metrics", metrics_view, name="metrics")
