"""The console's plumbing: templates, security headers, the session and CSRF gates.

Every console answer goes through ``page`` (a handler decorator): it sets the security headers
(a Content-Security-Policy that allows only the console's own script and style files, so no
inline script ever runs; ``X-Frame-Options: DENY``; no caching) and turns a ``Refused`` into an
HTML error page with its status. A write is refused (403) before anything is read from its
form unless it carries a valid session cookie and that session's CSRF token.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web
from multidict import MultiDictProxy

from proxy.console.session import COOKIE, PATH, Session, Sessions
from proxy.console.signouts import Refresher
from proxy.console.throttle import SignInThrottle
from proxy.policy.layers import LayerWriteError, check_target

SESSIONS: web.AppKey[Sessions] = web.AppKey("console_sessions", Sessions)
SIGNOUTS: web.AppKey[Refresher] = web.AppKey("console_signouts", Refresher)
THROTTLE: web.AppKey[SignInThrottle] = web.AppKey("console_throttle", SignInThrottle)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("proxy.console", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True)
_ENV.filters["num"] = lambda v: "—" if v is None else f"{int(v):,}"
_ENV.filters["when"] = lambda t: datetime.fromtimestamp(float(t), UTC).strftime(
    "%Y-%m-%d %H:%M UTC")
# US dollars: cents of a small bill matter, so four decimals under $100 (a negative saving keeps
# its sign in front of the dollar sign).
_ENV.filters["usd"] = lambda v: ("-" if v < 0 else "") + (
    f"${abs(v):,.4f}" if abs(v) < 100 else f"${abs(v):,.2f}")
_ENV.filters["pct"] = lambda v: "—" if v is None else f"{100 * v:.0f} %"


class Refused(Exception):
    """A request the console refuses: answered as an HTML page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def secure(resp: web.StreamResponse) -> web.StreamResponse:
    resp.headers.update(SECURITY_HEADERS)
    return resp


def page(handler: Handler) -> Handler:
    """Wrap a console handler: security headers on every answer, ``Refused`` as a page."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return secure(await handler(request))
        except Refused as e:
            return secure(render(request, "error.html", status=e.status, message=e.message))
        except web.HTTPRedirection as e:
            secure(e)
            raise

    return wrapped


def session_of(request: web.Request) -> Session | None:
    return request.app[SESSIONS].check(request.cookies.get(COOKIE))


def require_session(request: web.Request) -> Session:
    """A page's gate: no valid session sends the browser to the sign-in page."""
    session = session_of(request)
    if session is None:
        raise web.HTTPSeeOther(PATH + "login")
    return session


async def require_write(request: web.Request) -> tuple[Session, MultiDictProxy[Any]]:
    """A write's gate: a valid session and its CSRF token (form field ``csrf``), else 403."""
    session = session_of(request)
    if session is None:
        raise Refused(403, "Refused: sign in first (this request carried no valid session). "
                      "Nothing was changed.")
    form = await request.post()
    token = form.get("csrf")
    if not request.app[SESSIONS].csrf_ok(session, token if isinstance(token, str) else None):
        raise Refused(403, "Refused: this form's security token is missing or stale. Reload "
                      "the page and try again. Nothing was changed.")
    return session, form


def target(request: web.Request) -> tuple[str, str | None]:
    """The organization (and user) a URL names, checked like the admin API checks them."""
    try:
        return check_target(request.match_info["org"], request.match_info.get("user"))
    except LayerWriteError as e:
        raise Refused(e.status, e.message) from None


def render(request: web.Request, template: str, status: int = 200, **context: Any
           ) -> web.Response:
    session = session_of(request)
    csrf = request.app[SESSIONS].csrf_token(session) if session is not None else ""
    html = _ENV.get_template(template).render(base=PATH, csrf=csrf,
                                              signed_in=session is not None, **context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def _asset(name: str) -> bytes:
    return (resources.files("proxy.console") / "static" / name).read_bytes()


_TYPES = {"console.css": "text/css", "console.js": "text/javascript",
          "favicon.svg": "image/svg+xml"}
_ASSETS = {name: _asset(name) for name in _TYPES}


@page
async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise Refused(404, "No such file.")
    return web.Response(body=_ASSETS[name], content_type=_TYPES[name],
                        charset=None if name.endswith(".svg") else "utf-8")
