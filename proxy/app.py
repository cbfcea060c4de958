"""The aiohttp application: resources in ``cleanup_ctx``, the routes, the middleware.

Route order matters: specific ``/v1/...`` routes (chat, conversations, rerank) are registered
before the catch-all relay, which would otherwise take them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from proxy import console
from proxy.apis import ADAPTED
from proxy.auth import DEFAULT_ORG, Authenticator
from proxy.context.checked import CheckedLists
from proxy.context.managed import ContextService
from proxy.context.records.compactions import Records
from proxy.context.records.learned import LearnedWindows
from proxy.context.summary.in_api import api_summarizers
from proxy.context.summary.summarizer import upstream_summarizers
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.http import admin, apis, chat, conversations, ops, passthrough, rerank
from proxy.http.middleware import error_middleware, quiet_parser_errors, stamp_request_id
from proxy.http.websocket import responses_ws
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.watch import watch
from proxy.settings import Settings
from proxy.state import SETTINGS, STATE, ProxyState, upstream_for
from proxy.store import Store, StoreUnavailable, is_database_url, leases
from proxy.upstream.client import Upstream, fetch_models

log = logging.getLogger("context_proxy")


async def _resources(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = Store(settings.store_target, settings.db_pool_size)
    if not is_database_url(settings.store_target):  # SQLite: this process is its only one
        left = await store.write(leases.release_others, deadline=None)
        if left:
            log.info("released %d lease(s) an earlier process left in the store", left)
    metrics = Metrics()
    upstream = Upstream(settings.upstream_url, settings.upstream_api_key,
                        settings.upstream_timeout_s, metrics)
    anthropic = Upstream(settings.anthropic_url, settings.anthropic_api_key,
                         settings.upstream_timeout_s, metrics)
    auth = Authenticator(store, settings.auth_mode, settings.upstream_api_key,
                         settings.key_grace_s)
    policies = PolicyService(settings.platform)
    records = Records(store, lambda what, n: metrics.store_writes_lost.labels(what).inc(n))
    store.health.listen(lambda up: metrics.store_up.set(1 if up else 0))
    metrics.store_writes_queued.set_function(lambda: len(records.deferred))
    context = ContextService(
        counter=TokenCounter(), records=records, metrics=metrics, policies=policies,
        windows=WindowResolver(lambda: fetch_models(upstream), shared=LearnedWindows(store)),
        summarizers=upstream_summarizers(upstream, lambda: policies.platform.send_org_header),
        api_summarizers=api_summarizers({api.name: upstream_for(api, upstream, anthropic)
                                         for api in ADAPTED}))
    app[STATE] = ProxyState(settings, store, auth, upstream, metrics, policies, context,
                            CheckedLists(), anthropic)
    background = [asyncio.create_task(_purge_spills(store, context.records)),
                  asyncio.create_task(_flush_usage(context.records))]
    yield
    await context.preparer.close()  # leases released; a summary not stored whole is not stored
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await _last_writes(records, metrics)
    await upstream.close()
    await anthropic.close()
    await store.aclose()


async def _last_writes(records: Records, metrics: Metrics) -> None:
    """At shutdown: write what is queued and counted; what cannot be is counted as lost."""
    await records.deferred.drain()
    records.deferred.give_up()
    try:
        await records.flush_usage()
    except Exception as e:
        lost = records.pending_usage()
        log.warning("writing the last usage figures failed (%s): %d lost", type(e).__name__,
                    lost)
        metrics.store_writes_lost.labels("usage").inc(lost)


async def _purge_spills(store: Store, records: Records, every_s: float = 3600) -> None:
    """Drop spills (and leases) past their expiry, hourly, on one replica per hour: the first
    to tick takes the job's lease (``proxy.store.leases.run_once``)."""
    while True:
        try:
            if await leases.run_once(store, "spill-purge", every_s):
                purged = await records.purge_expired()
                await store.write(leases.purge_expired)
                log.info("spill purge: %d expired spill(s) dropped (this replica's turn)",
                         purged)
        except Exception:
            log.exception("purging expired spills failed")
        await asyncio.sleep(every_s)


async def _flush_usage(records: Records, every_s: float = 2.0) -> None:
    """Write the upstream usage counted in memory, every few seconds."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await records.flush_usage()
        except StoreUnavailable:
            pass  # kept for the next try; the store's own outage line says why
        except Exception:
            log.exception("writing usage figures failed; they are kept for the next try")


async def policy_context(app: web.Application) -> AsyncIterator[None]:
    """Load the stored policy layers before serving, then watch them and the folder."""
    state = app[STATE]
    state.policies.attach(state.store)
    task = asyncio.create_task(watch(state.policies, state.settings.policies_dir, state.metrics),
                               name="policy-watch")
    # The tokenizers of unknown models and of the platform's summary model, loaded aside: the
    # first compaction would otherwise wait for them (and, under load, for seconds).
    summary_model = state.policies.resolve(DEFAULT_ORG).compaction.summary_model
    warm = asyncio.create_task(asyncio.to_thread(
        state.context.counter.preload, ["", *([summary_model] if summary_model else [])]))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.gather(warm, return_exceptions=True)


async def _end_streams_in_time(app: web.Application) -> None:
    """``on_shutdown``: aiohttp lets open requests finish for the shutdown grace, then cuts
    their connections. Half a second before that, end every relayed stream with an SSE error
    event, and answer every request still waiting for a whole upstream answer 503 in its API's
    shape (``x-should-retry: true``), so a client sees a clean error rather than a cut."""
    state, grace = app[STATE], app[SETTINGS].shutdown_grace_s

    def end() -> None:
        ended = state.upstream.end_streams() + state.anthropic.end_streams()
        for upstream in (state.upstream, state.anthropic):
            upstream.end_waits()  # whole answers still awaited: 503, retry elsewhere
        if ended:
            log.warning("shutting down: ended %d open stream(s) with an error event", ended)

    asyncio.get_running_loop().call_later(max(0.0, grace - 0.5), end)


def create_app(settings: Settings) -> web.Application:
    quiet_parser_errors()
    app = web.Application(middlewares=[error_middleware],
                          client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_resources)
    app.cleanup_ctx.append(policy_context)  # after _resources: it needs the store
    app.on_shutdown.append(_end_streams_in_time)
    app.on_response_prepare.append(stamp_request_id)
    ops.add_routes(app)
    chat.add_routes(app)
    conversations.add_routes(app)
    rerank.add_routes(app)
    responses_ws.add_routes(app)  # before apis: its GET /v1/responses is the upgrade
    apis.add_routes(app)
    passthrough.add_routes(app)  # the catch-all: last of the /v1 routes
    if settings.admin_token:  # no token: the admin API does not exist (plain 404)
        admin.add_routes(app)
        console.add_routes(app, settings.admin_token)
    return app
