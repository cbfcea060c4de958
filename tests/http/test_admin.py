"""The admin API (``proxy.http.admin``), handlers called in process: the admin token is required
(and compared in constant time), views of layers that do not exist yet are valid, writes apply
the layer rules with their status, bodies are strict JSON within a size limit."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from inproc import routed

from proxy.errors import ApiError
from proxy.http.admin import list_orgs, policy_clear, policy_patch, policy_view
from proxy.state import STATE

App = Callable[..., Awaitable[web.Application]]
TOKEN = "admin-" + "z" * 30
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACME = "/admin/orgs/acme/policy"


async def test_the_admin_token_is_required(make_app: App) -> None:
    app = await make_app(CONTEXT_PROXY_ADMIN_TOKEN=TOKEN)
    for headers, code in (({}, "missing_admin_token"),
                          ({"Authorization": "Bearer wrong"}, "invalid_admin_token")):
        with pytest.raises(ApiError) as info:
            await list_orgs(await routed(app, "GET", "/admin/orgs", headers=headers))
        assert (info.value.status, info.value.code) == (401, code)


async def test_views_writes_and_clears_of_a_layer(make_app: App) -> None:
    app = await make_app(CONTEXT_PROXY_ADMIN_TOKEN=TOKEN)
    app[STATE].store.keys.create("acme")
    view = json.loads((await policy_view(await routed(app, "GET", ACME, headers=AUTH))).text
                      or "")
    assert view["org"] == "acme" and view["fields"]["rerank.keep"]["org"] is None
    patched = await policy_patch(await routed(app, "PATCH", ACME, headers=AUTH,
                                              body={"rerank.keep": 2}))
    assert json.loads(patched.text or "")["fields"]["rerank.keep"]["effective"] == 2
    orgs = json.loads((await list_orgs(await routed(app, "GET", "/admin/orgs", headers=AUTH)
                       )).text or "")["orgs"]
    assert [(o["org"], o["org_layer"], o["keys"]) for o in orgs] == [("acme", True, 1)]
    cleared = await policy_clear(await routed(app, "DELETE", ACME, headers=AUTH))
    assert json.loads(cleared.text or "")["fields"]["rerank.keep"]["org"] is None


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{oops", 400, "invalid_json"), (b'{"rerank.keep": NaN}', 400, "invalid_json"),
    (b'{"rerank.kep": 1}', 400, "unknown_field"), (b'{"rerank.keep": 0}', 400, "invalid_value"),
    (b"x" * (1024 * 1024 + 1), 413, "request_too_large")])
async def test_a_bad_write_is_refused_with_its_status(make_app: App, body: bytes, status: int,
                                                      code: str) -> None:
    app = await make_app(CONTEXT_PROXY_ADMIN_TOKEN=TOKEN)
    with pytest.raises(ApiError) as info:
        await policy_patch(await routed(app, "PATCH", ACME, headers=AUTH, body=body))
    assert (info.value.status, info.value.code) == (status, code)


async def test_a_bad_name_is_refused(make_app: App) -> None:
    app = await make_app(CONTEXT_PROXY_ADMIN_TOKEN=TOKEN)
    with pytest.raises(ApiError) as info:
        await policy_view(await routed(app, "GET", "/admin/orgs/a%01b/policy", headers=AUTH))
    assert (info.value.status, info.value.code) == (400, "invalid_name")
