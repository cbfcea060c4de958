"""The "Context & retrieval" pages: the platform's (read-only: it is YAML), an organization's
and a user's, with the edit form, the rerank toggle and "Use the platform default".

Writes go through ``PolicyService.set_fields`` / ``clear``, the admin API's own checks: a
refused write re-renders the page with the field named, what was typed kept, and the status
the admin API would answer (400 or 409).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from proxy.console import views
from proxy.console.session import PATH
from proxy.console.web import Refused, page, render, require_session, require_write, target
from proxy.policy.layers import EMPTY, LayerWriteError, field_states, view_json
from proxy.state import STATE

NOTICES = {"saved": "Saved. The new values are in force.",
           "unchanged": "Nothing to change: every value is as stored.",
           "cleared": "Cleared: this layer now uses the platform default for every field.",
           "field-cleared": "Cleared: the field now inherits; the layer's other values stay.",
           "rerank-on": "Retrieval rerank is on.", "rerank-off": "Retrieval rerank is off."}


def policy_url(org: str, user: str | None) -> str:
    url = f"{PATH}orgs/{quote(org, safe='')}"
    return url + (f"/users/{quote(user, safe='')}/policy" if user else "/policy")


def _render_policy(request: web.Request, org: str, user: str | None, *, status: int = 200,
                   typed: dict[str, str] | None = None,
                   error: LayerWriteError | None = None) -> web.Response:
    state = request.app[STATE]
    view = state.policies.view(org, user)
    layer = "user" if user else "org"
    notice = NOTICES.get(request.query.get("done", ""))
    rerank = view["fields"]["rerank.enabled"]
    users: list[str] = next(
        (o["users"] for o in state.policies.list_orgs({}) if o["org"] == org), [])
    return render(
        request, "policy.html", status=status, org=org, user=user, layer=layer,
        sections=views.rows(view, state.policies.platform, layer, typed,
                            (error.param, error.message) if error else None),
        managed_by=view["managed_by"], file=state.policies.platform.org_files.get(org),
        action=policy_url(org, user), rerank_on=bool(rerank["effective"]),
        rerank_locked=rerank["locked"], notice=notice, users=users,
        error=error.message if error else None, org_url=policy_url(org, None),
        conversations_url=f"{PATH}orgs/{quote(org, safe='')}/conversations")


@page
async def platform_page(request: web.Request) -> web.StreamResponse:
    require_session(request)
    state = request.app[STATE]
    await state.policies.refresh()
    platform = state.policies.platform
    view = {"fields": view_json(field_states(platform, EMPTY, EMPTY))}
    return render(request, "platform.html", sections=views.rows(view, platform, None),
                  locks=sorted(platform.locks),
                  bounds={k: v for k, v in sorted(platform.bounds.items())})


@page
async def policy_page(request: web.Request) -> web.StreamResponse:
    require_session(request)
    org, user = target(request)
    await request.app[STATE].policies.refresh()
    return _render_policy(request, org, user)


async def _write(request: web.Request, org: str, user: str | None, patch: dict[str, Any],
                 typed: dict[str, str] | None, done: str) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        await state.policies.set_fields(org, user, patch)
    except LayerWriteError as e:
        return _render_policy(request, org, user, status=e.status, typed=typed, error=e)
    raise web.HTTPSeeOther(f"{policy_url(org, user)}?done={done}")


@page
async def policy_save(request: web.Request) -> web.StreamResponse:
    """The edit form: only changed fields are sent, all or nothing (the admin API's rule)."""
    _, form = await require_write(request)
    org, user = target(request)
    state = request.app[STATE]
    await state.policies.refresh()  # locks and YAML ownership as of now
    view = state.policies.view(org, user)
    texts = {k: v for k, v in form.items() if isinstance(v, str)}
    patch, typed = views.patch_from_form(texts, view, "user" if user else "org")
    if not patch:
        raise web.HTTPSeeOther(f"{policy_url(org, user)}?done=unchanged")
    return await _write(request, org, user, patch, typed, "saved")


@page
async def rerank_toggle(request: web.Request) -> web.StreamResponse:
    _, form = await require_write(request)
    org, user = target(request)
    wanted = form.get("enabled")
    if wanted not in ("true", "false"):
        raise Refused(400, "The rerank toggle sends enabled=true or enabled=false.")
    await request.app[STATE].policies.refresh()
    on = wanted == "true"
    return await _write(request, org, user, {"rerank.enabled": on}, None,
                        "rerank-on" if on else "rerank-off")


@page
async def clear_field(request: web.Request) -> web.StreamResponse:
    """A row's "Clear" button: removes the layer's stored value of that one field (an
    ``ignored`` one, stored before a lock, too), through the admin API's field-write checks
    (unknown field, YAML-managed organization); the layer's other values stay."""
    _, form = await require_write(request)
    org, user = target(request)
    name = form.get("field")
    if not isinstance(name, str) or not name:
        raise Refused(400, "The clear button sends the field to clear (field=...).")
    await request.app[STATE].policies.refresh()
    return await _write(request, org, user, {name: None}, None, "field-cleared")


@page
async def clear_confirm(request: web.Request) -> web.StreamResponse:
    """The confirmation step of "Use the platform default" (a page, so it needs no script)."""
    require_session(request)
    org, user = target(request)
    state = request.app[STATE]
    await state.policies.refresh()
    view = state.policies.view(org, user)
    layer = "user" if user else "org"
    stored = {name: views.shown(f[layer]) for name, f in view["fields"].items()
              if f[layer] is not None}
    return render(request, "clear.html", org=org, user=user, stored=stored,
                  managed_by=view["managed_by"], back=policy_url(org, user),
                  action=policy_url(org, user) + "/clear")


@page
async def clear_layer(request: web.Request) -> web.StreamResponse:
    await require_write(request)
    org, user = target(request)
    state = request.app[STATE]
    await state.policies.refresh()
    try:
        await state.policies.clear(org, user)
    except LayerWriteError as e:
        return _render_policy(request, org, user, status=e.status, error=e)
    raise web.HTTPSeeOther(f"{policy_url(org, user)}?done=cleared")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(PATH + "platform", platform_page, name="console_platform")
    for base, name in ((PATH + "orgs/{org}/policy", "console_org_policy"),
                       (PATH + "orgs/{org}/users/{user}/policy", "console_user_policy")):
        r.add_get(base, policy_page, name=name)
        r.add_post(base, policy_save, name=name + "_save")
        r.add_post(base + "/rerank", rerank_toggle, name=name + "_rerank")
        r.add_get(base + "/clear", clear_confirm, name=name + "_clear_confirm")
        r.add_post(base + "/clear-field", clear_field, name=name + "_clear_field")
        r.add_post(base + "/clear", clear_layer, name=name + "_clear")
