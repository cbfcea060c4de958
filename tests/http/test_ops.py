"""The operator endpoints (``proxy.http.ops``), in process: ``/healthz`` never asks the store,
``/readyz`` says unavailable while it is down, ``/metrics`` is Prometheus text."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web
from inproc import request

from proxy.http.ops import healthz, metrics_view, readyz
from proxy.metrics import CONTENT_TYPE
from proxy.state import STATE
from proxy.store.health import StoreHealth


def unreachable() -> None:
    raise ConnectionError("the database does not answer")


async def test_health_readiness_and_metrics(
        make_app: Callable[..., Awaitable[web.Application]]) -> None:
    app = await make_app()
    assert json.loads((await healthz(request(app, "GET", "/healthz"))).text or "") == {
        "status": "ok"}
    ready = await readyz(request(app, "GET", "/readyz"))
    assert ready.status == 200 and json.loads(ready.text or "") == {"status": "ready"}
    metrics = await metrics_view(request(app, "GET", "/metrics"))
    assert metrics.headers["Content-Type"] == CONTENT_TYPE
    assert b"context_proxy_requests_in_flight" in (metrics.body or b"")  # type: ignore[operator]
    store = app[STATE].store
    real = store.health
    store.health = StoreHealth(unreachable)
    store.health.failed("a test outage")
    try:
        down = await readyz(request(app, "GET", "/readyz"))
        assert down.status == 503 and json.loads(down.text or "") == {
            "status": "unavailable", "reason": "StoreUnavailable"}
        assert (await healthz(request(app, "GET", "/healthz"))).status == 200
    finally:
        await store.health.close()
        store.health = real
