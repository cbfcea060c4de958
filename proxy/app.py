"""The aiohttp application: typed state, resources in ``cleanup_ctx``, routes and middleware."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from proxy import lazy
from proxy.auth import Authenticator
from proxy.config import Settings
from proxy.context import ContextManager
from proxy.errors import ApiError
from proxy.layers import PolicyService
from proxy.metrics import CONTENT_TYPE, Metrics
from proxy.records import Records
from proxy.store import Store
from proxy.tokens import TokenCounter
from proxy.upstream import Upstream, fetch_models
from proxy.window import WindowResolver

log = logging.getLogger("context_proxy")


@dataclass
class ProxyState:
    settings: Settings
    store: Store
    auth: Authenticator
    upstream: Upstream
    metrics: Metrics
    policies: PolicyService
    context: ContextManager


STATE: web.AppKey[ProxyState] = web.AppKey("state", ProxyState)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _route_label(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    name = info.route.name
    return name or info.route.resource.canonical if info.route.resource else "unmatched"


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as an OpenAI-shaped error; nothing leaks a traceback."""
    start = time.perf_counter()
    status = 500
    try:
        resp = await handler(request)
        status = resp.status
        return resp
    except ApiError as e:
        status = e.status
        return e.response()
    except web.HTTPException as e:
        status = e.status
        if e.status < 400:
            raise
        message = {404: "Unknown path.", 405: "Method not allowed for this path.",
                   413: "The request body is larger than this proxy accepts."}.get(
                       e.status, e.reason)
        return ApiError(e.status, message, code=e.reason.lower().replace(" ", "_")).response(
            headers={k: v for k, v in e.headers.items() if k.lower() == "allow"})
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return ApiError(500, "The proxy hit an internal error.", code="internal_error").response()
    finally:
        metrics = request.app.get(STATE)
        if metrics is not None:
            metrics.metrics.observe_request(_route_label(request), status,
                                            time.perf_counter() - start)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        state.store.reader.execute("SELECT 1").fetchone()
    except Exception as e:  # the database is the only local dependency
        return web.json_response({"status": "unavailable", "reason": type(e).__name__},
                                 status=503)
    return web.json_response({"status": "ready"})


async def metrics_view(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _resources(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = Store(settings.db_path)
    upstream = Upstream(settings.upstream_url, settings.upstream_api_key,
                        settings.upstream_timeout_s)
    auth = Authenticator(store, settings.auth_mode, settings.upstream_api_key)
    metrics = Metrics()
    context = ContextManager(
        counter=TokenCounter(), records=Records(store), metrics=metrics,
        windows=WindowResolver(lambda: fetch_models(upstream)),
        upstream_url=settings.upstream_url)
    app[STATE] = ProxyState(settings, store, auth, upstream, metrics,
                            PolicyService(settings.platform), context)
    background = [asyncio.create_task(_purge_spills(context.records))]
    yield
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await lazy.shutdown()
    await upstream.close()
    store.close()


async def _purge_spills(records: Records) -> None:
    """Drop spills past their retention, hourly."""
    while True:
        try:
            await records.purge_expired()
        except Exception:
            log.exception("purging expired spills failed")
        await asyncio.sleep(3600)


def create_app(settings: Settings) -> web.Application:
    from proxy import conversations_api, rerank_route
    from proxy.admin import add_admin_routes
    from proxy.chat import chat_completions
    from proxy.passthrough import relay_any
    from proxy.policy_watch import policy_context

    app = web.Application(middlewares=[error_middleware],
                          client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_resources)
    app.cleanup_ctx.append(policy_context)  # after _resources: it needs the store
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/readyz", readyz, name="readyz")
    app.router.add_get("/metrics", metrics_view, name="metrics")
    app.router.add_post("/v1/chat/completions", chat_completions, name="chat")
    conversations_api.add_routes(app)
    rerank_route.add_routes(app)  # before the catch-all relay, which would otherwise take it
    app.router.add_route("*", "/v1/{tail:.*}", relay_any, name="relay")
    if settings.admin_token:  # no token: the admin API does not exist (plain 404)
        add_admin_routes(app)
    return app
