"""The console's sign-in and usage pages (``proxy.console.pages``), in process on the suite's
store: a wrong token is refused and counted until the throttle pauses sign-in, the right one
sets the session cookie, signing out needs the CSRF token, and the overview and conversation
pages show what the store holds (another organization's conversation is not found)."""

from __future__ import annotations

import pytest
from aiohttp import web
from inproc import ADMIN_TOKEN, form, request

from proxy.console.pages import (
    conversation_page,
    conversations_page,
    login,
    login_page,
    logout,
    overview,
    spill_page,
    to_console,
)
from proxy.console.session import COOKIE, PATH
from proxy.console.web import SESSIONS
from proxy.context.identity import conversation_key
from proxy.state import STATE


async def test_the_right_token_signs_in_and_wrong_ones_trip_the_throttle(
        console_app: web.Application) -> None:
    with pytest.raises(web.HTTPSeeOther) as signed:
        await login(form(console_app, PATH + "login", {"token": ADMIN_TOKEN}))
    cookie = signed.value.cookies[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == PATH
    assert console_app[SESSIONS].check(cookie.value) is not None
    statuses = []
    for _ in range(11):
        answer = await login(form(console_app, PATH + "login", {"token": "wrong"}))
        statuses.append(answer.status)
    assert statuses == [401] * 10 + [429]
    paused = await login(form(console_app, PATH + "login", {"token": ADMIN_TOKEN}))
    assert paused.status == 429 and int(paused.headers["Retry-After"]) >= 1  # the right one too


async def test_signed_in_visitors_skip_the_login_page_and_can_sign_out(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    cookie, csrf = signed_in
    assert (await login_page(request(console_app, "GET", PATH + "login"))).status == 200
    with pytest.raises(web.HTTPSeeOther):
        await login_page(request(console_app, "GET", PATH + "login", headers=cookie))
    refused = await logout(form(console_app, PATH + "logout", {}, cookie))
    assert refused.status == 403
    with pytest.raises(web.HTTPSeeOther) as out:
        await logout(form(console_app, PATH + "logout", {"csrf": csrf}, cookie))
    assert out.value.location == PATH + "login?signed_out=1"
    with pytest.raises(web.HTTPSeeOther):  # the session is over
        await overview(request(console_app, "GET", PATH, headers=cookie))
    with pytest.raises(web.HTTPPermanentRedirect):
        await to_console(request(console_app, "GET", PATH.rstrip("/")))


async def test_the_overview_and_conversation_pages_show_the_store(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    cookie, _ = signed_in
    state = console_app[STATE]
    state.store.keys.create("acme")
    key = conversation_key("acme", "ticket-9")
    state.store.atomic(lambda tx: tx.execute(
        "INSERT INTO conversations (id, org, created_at, updated_at, public_id) "
        "VALUES (?, 'acme', 1.0, 2.0, 'ticket-9')", [key]))
    home = await overview(request(console_app, "GET", PATH, headers=cookie))
    assert home.status == 200 and "acme" in (home.text or "")
    listed = await conversations_page(request(console_app, "GET", "/", headers=cookie,
                                              match_info={"org": "acme"}))
    assert "ticket-9" in (listed.text or "")
    where = {"org": "acme", "conversation": key}
    one = await conversation_page(request(console_app, "GET", "/", headers=cookie,
                                          match_info=where))
    assert one.status == 200 and "ticket-9" in (one.text or "")
    other = await conversation_page(request(console_app, "GET", "/", headers=cookie,
                                            match_info={"org": "beta", "conversation": key}))
    assert other.status == 404
    spill = await spill_page(request(console_app, "GET", "/", headers=cookie,
                                     match_info={**where, "spill": "sp_none"}))
    assert spill.status == 404 and "No such spill" in (spill.text or "")


async def test_the_overview_shows_the_reasoning_an_organization_lost(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    """Removed by a compaction and dropped by the provider, summed over the stored hours."""
    cookie, _ = signed_in
    state = console_app[STATE]
    state.store.keys.create("acme")
    records = state.context.records
    records.add_upstream_usage("acme", conversation_key("acme", "t-1"), "claude-opus-5-5",
                               1000, 800, lost=(3, 0))
    records.add_upstream_usage("acme", conversation_key("acme", "t-2"), "gpt-5.6", 900, 0,
                               lost=(0, 4))
    await records.flush_usage()
    page = (await overview(request(console_app, "GET", PATH, headers=cookie))).text or ""
    acme = page[page.index(">acme"):]
    assert "Reasoning lost" in acme
    assert '<dd class="reasoning-lost">7</dd>' in acme
