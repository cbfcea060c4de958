"""The admin API under ``/admin/`` (SPEC section 7.1): effective views, layer writes, org list.

Registered only when ``CONTEXT_PROXY_ADMIN_TOKEN`` is set (otherwise every ``/admin/`` path is a
plain 404). Every request needs ``Authorization: Bearer <admin token>``, compared in constant
time (401 otherwise). Responses never hold a key or a key hash: organizations carry key counts
only.

- ``GET /admin/orgs``: ``{"orgs": [{"org", "managed_by", "file", "org_layer", "users",
  "keys"}]}``.
- ``GET|PATCH|DELETE /admin/orgs/{org}/policy`` and ``/admin/orgs/{org}/users/{user}/policy``:
  the effective view ``{"org", "user", "managed_by", "fields": {...}}``; PATCH merges a
  ``{"dotted.field": value}`` object into the layer (``null`` unsets a field), DELETE clears the
  layer. Both answer the view after the change.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from aiohttp import web

from proxy.auth import bearer_token
from proxy.errors import ApiError, bad_request
from proxy.policy.layers import LayerWriteError, check_target
from proxy.state import STATE
from proxy.store.keys import key_counts

MAX_ADMIN_BODY = 1024 * 1024


def _authorize(request: web.Request) -> None:
    expected = request.app[STATE].settings.admin_token
    token = bearer_token(request)
    if token is None:
        raise ApiError(401, "Missing admin token: send 'Authorization: Bearer <admin token>'.",
                       code="missing_admin_token")
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise ApiError(401, "Invalid admin token.", code="invalid_admin_token")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON number")


async def _json_body(request: web.Request) -> Any:
    length = request.content_length
    if length is not None and length > MAX_ADMIN_BODY:
        raise ApiError(413, f"Admin request bodies are limited to {MAX_ADMIN_BODY} bytes.",
                       code="request_too_large")
    raw = await request.read()
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad_request(f"The request body is not valid JSON: {e}.",
                          code="invalid_json") from None


def _target(request: web.Request) -> tuple[str, str | None]:
    try:
        return check_target(request.match_info["org"], request.match_info.get("user"))
    except LayerWriteError as e:
        raise ApiError(e.status, e.message, param=e.param, code=e.code) from None


async def list_orgs(request: web.Request) -> web.Response:
    _authorize(request)
    state = request.app[STATE]
    await state.policies.refresh()
    keys = await state.store.run(state.store.snapshot, key_counts)
    return web.json_response({"orgs": state.policies.list_orgs(keys)})


async def policy_view(request: web.Request) -> web.Response:
    """GET: the effective view. An organization or user with no stored layer is not an error:
    its view shows what would run for it (the platform values, or the organization's)."""
    _authorize(request)
    org, user = _target(request)
    state = request.app[STATE]
    await state.policies.refresh()
    return web.json_response(state.policies.view(org, user))


async def policy_patch(request: web.Request) -> web.Response:
    _authorize(request)
    org, user = _target(request)
    body = await _json_body(request)
    state = request.app[STATE]
    await state.policies.refresh()  # locks and YAML ownership as of now
    try:
        view = await state.policies.set_fields(org, user, body)
    except LayerWriteError as e:
        raise ApiError(e.status, e.message, param=e.param, code=e.code) from None
    return web.json_response(view)


async def policy_clear(request: web.Request) -> web.Response:
    _authorize(request)
    org, user = _target(request)
    state = request.app[STATE]
    try:
        view = await state.policies.clear(org, user)
    except LayerWriteError as e:
        raise ApiError(e.status, e.message, param=e.param, code=e.code) from None
    return web.json_response(view)


def add_routes(app: web.Application) -> None:
    """Register ``/admin/`` routes; call only when an admin token is configured."""
    r = app.router
    r.add_get("/admin/orgs", list_orgs, name="admin_orgs")
    for path, name in (("/admin/orgs/{org}/policy", "admin_org_policy"),
                       ("/admin/orgs/{org}/users/{user}/policy", "admin_user_policy")):
        resource = r.add_resource(path, name=name)
        resource.add_route("GET", policy_view)
        resource.add_route("PATCH", policy_patch)
        resource.add_route("DELETE", policy_clear)
