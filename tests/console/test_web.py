"""The console's plumbing (``proxy.console.web``), in process: security headers on every answer,
a refusal as an HTML page with its status, the session and CSRF gates, the shipped assets."""

from __future__ import annotations

import pytest
from aiohttp import web
from inproc import form, request

from proxy.console.session import PATH
from proxy.console.web import (
    CSP,
    Refused,
    page,
    render,
    require_session,
    require_write,
    static,
    target,
)


@page
async def refusing(request: web.Request) -> web.StreamResponse:
    raise Refused(409, "Not <now>.")


async def test_a_refusal_is_a_page_with_its_status_and_the_security_headers(
        console_app: web.Application) -> None:
    answer = await refusing(request(console_app, "GET", PATH))
    assert isinstance(answer, web.Response) and answer.status == 409
    assert "Not &lt;now&gt;." in (answer.text or "")  # escaped: never markup
    assert answer.headers["Content-Security-Policy"] == CSP
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Cache-Control"] == "no-store"


async def test_assets_are_served_and_unknown_names_refused(console_app: web.Application
                                                           ) -> None:
    css = await static(request(console_app, "GET", PATH + "static/console.css",
                               match_info={"name": "console.css"}))
    assert css.status == 200 and css.content_type == "text/css"
    gone = await static(request(console_app, "GET", PATH + "static/x.js",
                                match_info={"name": "x.js"}))
    assert gone.status == 404


async def test_pages_need_a_session_and_writes_its_csrf_token(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    with pytest.raises(web.HTTPSeeOther) as to_login:
        require_session(request(console_app, "GET", PATH))
    assert to_login.value.location == PATH + "login"
    cookie, csrf = signed_in
    assert require_session(request(console_app, "GET", PATH, headers=cookie)) is not None
    for headers, fields, says in (({}, {"csrf": csrf}, "sign in first"),
                                  (cookie, {}, "security token is missing or stale"),
                                  (cookie, {"csrf": "forged"}, "missing or stale")):
        with pytest.raises(Refused) as info:
            await require_write(form(console_app, PATH + "logout", fields, headers))
        assert info.value.status == 403 and says in info.value.message
    signed, fields = await require_write(form(console_app, PATH + "logout",
                                               {"csrf": csrf, "x": "1"}, cookie))
    assert fields["x"] == "1" and signed.nonce


async def test_a_page_names_a_valid_target_and_carries_the_csrf_token(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    ok = request(console_app, "GET", "/", match_info={"org": "acme", "user": "bob"})
    assert target(ok) == ("acme", "bob")
    with pytest.raises(Refused) as info:
        target(request(console_app, "GET", "/", match_info={"org": "a/b"}))
    assert info.value.status == 400
    cookie, csrf = signed_in
    html = render(request(console_app, "GET", PATH, headers=cookie), "error.html",
                  message="m").text or ""
    assert csrf in html
