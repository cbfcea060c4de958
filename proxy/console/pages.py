"""Sign-in and sign-out, the organizations overview, and an organization's conversations.

The overview and the conversation pages first write the usage counted in memory
(``Records.flush_usage``, otherwise done every 2 s), so they show every request answered so far.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from aiohttp import web

from proxy.console import queries
from proxy.console.chart import chart
from proxy.console.session import COOKIE, PATH
from proxy.console.throttle import client_address, over_tls
from proxy.console.web import (
    SESSIONS,
    SIGNOUTS,
    THROTTLE,
    Refused,
    page,
    render,
    require_session,
    require_write,
    session_of,
    target,
)
from proxy.state import STATE
from proxy.store import StoreUnavailable
from proxy.store.keys import key_counts

log = logging.getLogger("context_proxy")


@page
async def login_page(request: web.Request) -> web.StreamResponse:
    if session_of(request) is not None:
        raise web.HTTPSeeOther(PATH)
    return render(request, "login.html", error=None,
                  signed_out=request.query.get("signed_out") == "1")


def _throttled(request: web.Request, address: str) -> web.Response | None:
    """A 429 page when sign-in is throttled for ``address`` (or for all), else None."""
    refused = request.app[THROTTLE].refused(address)
    if refused is None:
        return None
    scope, retry_s = refused
    request.app[STATE].metrics.console_signins_throttled.labels(scope).inc()
    resp = render(request, "login.html", status=429, signed_out=False,
                  error=f"Too many wrong tokens; sign-in is paused. Try again in {retry_s} s.")
    resp.headers["Retry-After"] = str(retry_s)
    return resp


@page
async def login(request: web.Request) -> web.StreamResponse:
    """Sign in. Once wrong tokens have tripped the throttle, every sign-in from that address
    (or from all, for the total) is a 429, the right token's too, until ``Retry-After``."""
    trusted = request.app[STATE].settings.trusted_proxies
    address = client_address(request, trusted)
    throttled = _throttled(request, address)
    if throttled is not None:
        return throttled
    form = await request.post()
    token = form.get("token")
    sessions = request.app[SESSIONS]
    if not isinstance(token, str) or not token or not sessions.admin_token_matches(token):
        request.app[THROTTLE].wrong_token(address)
        tripped = request.app[THROTTLE].refused(address)
        if tripped is not None:  # this one tripped it: one line per trip, not per refusal
            log.warning("console sign-in throttled for %s s: too many wrong admin tokens %s",
                        tripped[1], f"from {address}" if tripped[0] == "address"
                        else "from all addresses together")
        return render(request, "login.html", status=401, signed_out=False,
                      error="That is not the admin token (CONTEXT_PROXY_ADMIN_TOKEN).")
    cookie, _ = sessions.issue()
    resp = web.HTTPSeeOther(PATH)
    resp.set_cookie(COOKIE, cookie, max_age=sessions.ttl_s, path=PATH, httponly=True,
                    samesite="Strict", secure=over_tls(request, trusted))
    raise resp


@page
async def logout(request: web.Request) -> web.StreamResponse:
    session, _ = await require_write(request)
    try:
        await request.app[SIGNOUTS].sign_out(session)
    except StoreUnavailable:
        raise Refused(503, "Not signed out: the proxy's store is unavailable, so other "
                      "replicas would still accept this session. Try again shortly.") from None
    resp = web.HTTPSeeOther(PATH + "login?signed_out=1")
    resp.del_cookie(COOKIE, path=PATH)
    raise resp


async def _flushed(request: web.Request) -> None:
    await request.app[STATE].context.records.flush_usage()


def _org_entry(org: dict[str, Any], usage: queries.OrgUsage,
               series: dict[str, list[int]], mode: str) -> dict[str, Any]:
    names = sorted(set(org["users"]) | set(usage.users))
    return {"org": org["org"], "managed_by": org["managed_by"], "totals": usage.org,
            "mode": mode,
            "quoted": quote(org["org"], safe=""),
            "users": [(u, quote(u, safe=""), usage.users.get(u, queries.Totals()))
                      for u in names],
            "chart": chart(series, queries.HOURS)}


@page
async def overview(request: web.Request) -> web.StreamResponse:
    require_session(request)
    state = request.app[STATE]
    await _flushed(request)
    await state.policies.refresh()
    store = state.store
    usage = await store.run(queries.usage_by_org, store)
    series = await store.run(queries.hourly_series, store)
    orgs = {o["org"]: o for o in state.policies.list_orgs(
        await store.run(store.snapshot, key_counts))}
    for name in usage:  # an organization known only by its traffic (passthrough's default)
        orgs.setdefault(name, {"org": name, "managed_by": state.policies.managed_by(name),
                               "users": []})
    entries = [_org_entry(orgs[name], usage.get(name, queries.OrgUsage()), series.get(name, {}),
                          state.policies.resolve(name).mode) for name in sorted(orgs)]
    return render(request, "overview.html", orgs=entries, hours=queries.HOURS)


@page
async def conversations_page(request: web.Request) -> web.StreamResponse:
    require_session(request)
    org, _ = target(request)
    await _flushed(request)
    store = request.app[STATE].store
    rows = await store.run(queries.conversations, store, org)
    return render(request, "conversations.html", org=org, quoted=quote(org, safe=""),
                  conversations=rows, limit=queries.LIST_LIMIT)


async def _conversation(request: web.Request) -> tuple[str, str, dict[str, Any]]:
    org, _ = target(request)
    key = request.match_info["conversation"]
    store = request.app[STATE].store
    found = await store.run(queries.conversation, store, org, key)
    if found is None:
        raise Refused(404, "No such conversation in this organization.")
    return org, key, found


@page
async def conversation_page(request: web.Request) -> web.StreamResponse:
    require_session(request)
    await _flushed(request)
    org, key, found = await _conversation(request)
    state = request.app[STATE]
    summaries = await state.store.run(queries.summaries, state.store, key)
    dividers = [{**d, "summary": summaries.get(d["id"], "")}
                for d in await state.store.run(state.context.records.dividers, key)]
    return render(request, "conversation.html", org=org, quoted=quote(org, safe=""), key=key,
                  conversation=found, dividers=dividers,
                  spills=await state.store.run(queries.spills, state.store, key))


@page
async def spill_page(request: web.Request) -> web.StreamResponse:
    """One retained spill's original text (opened on demand from the conversation page)."""
    require_session(request)
    org, key, found = await _conversation(request)
    state = request.app[STATE]
    spill = await state.store.run(state.context.records.spill, key, request.match_info["spill"])
    if spill is None:
        raise Refused(404, "No such spill (or it expired).")
    return render(request, "spill.html", org=org, quoted=quote(org, safe=""), key=key,
                  conversation=found, spill=spill)


async def to_console(request: web.Request) -> web.StreamResponse:
    raise web.HTTPPermanentRedirect(PATH)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(PATH.rstrip("/"), to_console, name="console_redirect")
    r.add_get(PATH, overview, name="console_overview")
    r.add_get(PATH + "login", login_page, name="console_login_page")
    r.add_post(PATH + "login", login, name="console_login")
    r.add_post(PATH + "logout", logout, name="console_logout")
    r.add_get(PATH + "orgs/{org}/conversations", conversations_page,
              name="console_conversations")
    base = PATH + "orgs/{org}/conversations/{conversation}"
    r.add_get(base, conversation_page, name="console_conversation")
    r.add_get(base + "/spills/{spill}", spill_page, name="console_spill")
