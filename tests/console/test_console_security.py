"""The console's gates, driven over HTTP: sign-in, the session cookie, CSRF on every write,
security headers, and no console without an admin token."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from console_support import TOKEN, Console

from proxy.console.session import COOKIE, Sessions
from proxy.testing.harness import Harness

PAGES = ["", "platform", "orgs/acme/policy", "orgs/acme/users/alice/policy",
         "orgs/acme/policy/clear", "orgs/acme/conversations", "orgs/yamlco/policy"]
# Every write of the console, with a body that would change something if it were let through.
WRITES = [("orgs/acme/policy", {"compaction.trigger_ratio": "0.6"}),
          ("orgs/acme/users/alice/policy", {"masking.keep_recent": "2"}),
          ("orgs/acme/policy/rerank", {"enabled": "true"}),
          ("orgs/acme/users/alice/policy/rerank", {"enabled": "true"}),
          ("orgs/acme/policy/clear", {}),
          ("orgs/acme/users/alice/policy/clear", {})]


@pytest.fixture
def http(console: Console) -> Iterator[Callable[..., httpx.Client]]:
    """``http(cookies=...)``: a client of the console, closed at the end of the test."""
    made: list[httpx.Client] = []

    def make(**kwargs: Any) -> httpx.Client:
        made.append(httpx.Client(base_url=console.ui, timeout=30, **kwargs))
        return made[-1]

    yield make
    for c in made:
        c.close()


def signed_in(http: Callable[..., httpx.Client]) -> httpx.Client:
    c = http()
    resp = c.post("login", data={"token": TOKEN})
    assert resp.status_code == 303 and resp.headers["location"] == "/admin/ui/"
    return c


def csrf_of(c: httpx.Client, path: str = "orgs/acme/policy") -> str:
    resp = c.get(path)
    assert resp.status_code == 200, resp.text
    found = re.search(r'name="csrf" value="([^"]+)"', resp.text)
    assert found
    return found[1]


@pytest.fixture
def seeded(console: Console) -> Iterator[Console]:
    """Layers that every refused write would change: acme's org layer and alice's."""
    assert console.api("PATCH", "/admin/orgs/acme/policy",
                       {"compaction.trigger_ratio": 0.7}).status_code == 200
    assert console.api("PATCH", "/admin/orgs/acme/users/alice/policy",
                       {"masking.keep_recent": 4}).status_code == 200
    yield console


def test_console_is_absent_without_an_admin_token(harness: Harness) -> None:
    base = harness.base_url.removesuffix("/v1")
    for path in ("/admin/ui/", "/admin/ui/login", "/admin/ui/static/console.js",
                 "/admin/ui/orgs/acme/policy"):
        assert httpx.get(base + path).status_code == 404, path
    assert httpx.post(base + "/admin/ui/login", data={"token": "x"}).status_code == 404


def test_pages_need_a_session_and_sign_in_needs_the_token(console: Console,
                                                         http: Callable[..., httpx.Client]) -> None:
    c = http()
    for path in PAGES:
        resp = c.get(path)
        assert (resp.status_code, resp.headers["location"]) == (303, "/admin/ui/login"), path
    wrong = c.post("login", data={"token": TOKEN + "x"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert "not the admin token" in wrong.text
    assert c.post("login", data={}).status_code == 401
    resp = c.post("login", data={"token": TOKEN})
    cookie = resp.headers["set-cookie"]
    assert cookie.startswith(COOKIE + "=")
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "max-age", "path", "samesite"} <= attributes
    assert "SameSite=Strict" in cookie and "Path=/admin/ui/" in cookie
    for path in PAGES:
        assert c.get(path).status_code == 200, path


def test_every_write_without_a_valid_session_or_csrf_token_changes_nothing(
        seeded: Console, http: Callable[..., httpx.Client]) -> None:
    before = (seeded.stored_layers(), seeded.view("acme"), seeded.view("acme", "alice"))
    c = signed_in(http)
    good = csrf_of(c)
    other = signed_in(http)  # another session's token is stale for this one
    theirs = csrf_of(other)
    anonymous = http()
    forged = http(cookies={COOKIE: f"9999999999.abc.{'0' * 64}"})
    for path, body in [*WRITES, ("logout", {})]:
        for client, token in ((anonymous, good), (forged, good), (c, None), (c, ""),
                              (c, "0" * 64), (c, theirs)):
            data = dict(body, **({} if token is None else {"csrf": token}))
            resp = client.post(path, data=data)
            assert resp.status_code == 403, (path, token, resp.text)
            assert "Refused" in resp.text and "Nothing was changed" in resp.text
    assert (seeded.stored_layers(), seeded.view("acme"), seeded.view("acme", "alice")) == before
    # The session was never ended by a refused sign-out: its token still works.
    assert c.post("orgs/acme/policy/rerank", data={"enabled": "true", "csrf": good}
                  ).status_code == 303
    assert seeded.view("acme")["rerank.enabled"]["effective"] is True


def test_sign_out_ends_the_session_and_its_csrf_token(seeded: Console,
                                                     http: Callable[..., httpx.Client]) -> None:
    c = signed_in(http)
    token = csrf_of(c)
    cookie = c.cookies[COOKIE]
    resp = c.post("logout", data={"csrf": token})
    assert (resp.status_code, resp.headers["location"]) == (303, "/admin/ui/login?signed_out=1")
    assert COOKIE not in c.cookies
    before = seeded.stored_layers()
    replay = http(cookies={COOKIE: cookie})
    assert replay.get("").status_code == 303
    assert replay.post("orgs/acme/policy/clear", data={"csrf": token}).status_code == 403
    assert seeded.stored_layers() == before


def test_sessions_expire_and_refuse_tampering() -> None:
    sessions = Sessions("token-a", ttl_s=60)
    cookie, session = sessions.issue(now=1000.0)
    assert sessions.check(cookie, now=1059.0) == session
    assert sessions.check(cookie, now=1060.0) is None  # expired
    expiry, nonce, signature = cookie.split(".")
    assert sessions.check(f"{int(expiry) + 3600}.{nonce}.{signature}", now=1000.0) is None
    assert Sessions("token-b").check(cookie, now=1000.0) is None  # a new admin token
    assert not sessions.csrf_ok(session, None)
    assert sessions.csrf_ok(session, sessions.csrf_token(session))


class _Scripts(HTMLParser):
    """Collects what would run as inline script: script bodies, scripts without a source,
    event-handler attributes and javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self.sources: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            self._in_script = True
            if values.get("src"):
                self.sources.append(str(values["src"]))
            else:
                self.inline.append("<script> without src")
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.inline.append(f"{tag} {name}")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(data.strip()[:40])


def test_security_headers_and_no_inline_script_on_every_page(
        seeded: Console, http: Callable[..., httpx.Client]) -> None:
    c = signed_in(http)
    anonymous = http()
    answers = [anonymous.get("login"), anonymous.post("orgs/acme/policy/clear"),
               *(c.get(p) for p in PAGES)]
    for resp in answers:
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        scripts = _Scripts()
        scripts.feed(resp.text)
        assert scripts.inline == [], resp.url
        assert scripts.sources == ["/admin/ui/static/console.js"]
    js = c.get("static/console.js")
    assert js.headers["content-type"].startswith("text/javascript")
    assert c.get("static/nothing.js").status_code == 404


def test_yaml_managed_organization_is_read_only(console: Console,
                                               http: Callable[..., httpx.Client]) -> None:
    c = signed_in(http)
    page = c.get("orgs/yamlco/policy").text
    assert "managed by YAML" in page
    assert 'id="save"' not in page and 'id="use-default"' not in page
    assert 'id="rerank-toggle"' not in page
    inputs = re.findall(r'<(?:input|select) id="f-[^"]+"[^>]*>', page)
    assert inputs and all(" disabled" in i for i in inputs)
    token = csrf_of(c, "orgs/yamlco/policy")
    resp = c.post("orgs/yamlco/policy", data={"csrf": token, "compaction.trigger_ratio": "0.6"})
    assert resp.status_code == 409 and "managed by YAML" in resp.text
    resp = c.post("orgs/yamlco/policy/clear", data={"csrf": token})
    assert resp.status_code == 409
    assert console.view("yamlco")["compaction.trigger_ratio"]["effective"] == 0.7
    assert console.stored_layers() == []


def test_bad_names_and_unknown_conversations_are_clear_errors(
        console: Console, http: Callable[..., httpx.Client]) -> None:
    c = signed_in(http)
    assert c.get("orgs/acme/conversations/nope").status_code == 404
    assert c.get("orgs/acme/conversations/nope/spills/abcdef0123456789").status_code == 404
    resp = c.get("orgs/%01bad/policy")
    assert resp.status_code == 400 and "Invalid organization name" in resp.text
