"""A conversation's records (``proxy.http.conversations``), handlers called in process: dividers
and spills only within the caller's organization (another's answers 404 like a missing one),
manual compaction refused while it is off and of a conversation with nothing to compact."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from inproc import routed

from proxy.context.identity import conversation_key
from proxy.errors import ApiError
from proxy.http.conversations import compact_now, get_spill, list_dividers
from proxy.state import STATE

App = Callable[..., Awaitable[web.Application]]


def add_conversation(app: web.Application, org: str, public: str) -> str:
    key = conversation_key(org, public)
    app[STATE].store.atomic(lambda tx: tx.execute(
        "INSERT INTO conversations (id, org, created_at) VALUES (?, ?, 1.0)", [key, org]))
    return key


async def test_dividers_and_spills_are_the_callers_own(make_app: App) -> None:
    app = await make_app()
    store = app[STATE].store
    acme, beta = store.keys.create("acme")[1], store.keys.create("beta")[1]
    add_conversation(app, "acme", "ticket-1")
    path = "/v1/conversations/ticket-1/dividers"
    answer = await list_dividers(await routed(app, "GET", path,
                                              headers={"Authorization": f"Bearer {acme}"}))
    assert json.loads(answer.text or "") == {"object": "list", "conversation_id": "ticket-1",
                                             "data": []}
    with pytest.raises(ApiError) as other:
        await list_dividers(await routed(app, "GET", path,
                                         headers={"Authorization": f"Bearer {beta}"}))
    assert (other.value.status, other.value.code) == (404, "conversation_not_found")
    with pytest.raises(ApiError) as spill:
        await get_spill(await routed(app, "GET", "/v1/conversations/ticket-1/spills/sp_1",
                                     headers={"Authorization": f"Bearer {acme}"}))
    assert spill.value.code == "spill_not_found"


async def test_manual_compaction_needs_the_setting_and_something_to_compact(
        make_app: App) -> None:
    off = await make_app()
    key = off[STATE].store.keys.create("acme")[1]
    body = {"model": "m-32k", "messages": [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": "hello"}]}
    path = "/v1/conversations/ticket-2/compact"
    with pytest.raises(ApiError) as disabled:
        await compact_now(await routed(off, "POST", path, body=body,
                                       headers={"Authorization": f"Bearer {key}"}))
    assert (disabled.value.status, disabled.value.code) == (403, "manual_compaction_disabled")
    on = await make_app(CONTEXT_PROXY_MANUAL_COMPACTION="true")
    key = on[STATE].store.keys.create("acme")[1]
    with pytest.raises(ApiError) as nothing:
        await compact_now(await routed(on, "POST", path, body=body,
                                       headers={"Authorization": f"Bearer {key}"}))
    assert (nothing.value.status, nothing.value.code) == (409, "nothing_to_compact")
