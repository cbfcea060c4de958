"""The console's registration (``proxy.console``): its routes exist only with an admin token,
and at start-up the sign-outs already in the store are read (a cookie signed out before a
restart stays refused)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from inproc import ADMIN_TOKEN, settings_for, started

from proxy.console import add_routes
from proxy.console.session import PATH, Sessions
from proxy.console.signouts import record
from proxy.console.web import SESSIONS, SIGNOUTS, THROTTLE
from proxy.store import Store


async def test_a_sign_out_stored_before_the_start_is_refused_after_it(
        tmp_path: Path, database_url: str | None) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", database_url,
                            env={"CONTEXT_PROXY_ADMIN_TOKEN": ADMIN_TOKEN})
    cookie, session = Sessions(ADMIN_TOKEN).issue()
    before = Store(settings.store_target)
    before.atomic(record, session.nonce, session.expires_at)
    before.close()
    async with started(settings) as app:
        assert app[SESSIONS].check(cookie) is None
        assert app[SIGNOUTS].version is not None and app[THROTTLE] is not None
        paths = {r.resource.canonical for r in app.router.routes() if r.resource}
        assert {PATH, PATH + "login", PATH + "platform",
                PATH + "orgs/{org}/policy"} <= paths


def test_registering_adds_the_pages_the_session_keys_and_the_throttle() -> None:
    app = web.Application()
    add_routes(app, ADMIN_TOKEN)
    names = {r.name for r in app.router.resources()}
    assert {"console_overview", "console_login", "console_org_policy", "console_static"} <= names
    assert app[SESSIONS].admin_token_matches(ADMIN_TOKEN) and app[THROTTLE] is not None
