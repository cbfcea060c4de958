"""Console sessions across processes (SPEC section 10): a sign-out is recorded in the store, so
another proxy on the same store refuses the cookie within 2 s, and so does a restarted one."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx
from console_support import TOKEN, Console

from proxy.console.session import COOKIE

WITHIN_S = 2.0


def sign_in(ui: str) -> tuple[str, str]:
    """A new session on the console at ``ui``: its cookie and a form's CSRF token."""
    with httpx.Client(base_url=ui, timeout=30) as c:
        resp = c.post("login", data={"token": TOKEN})
        assert resp.status_code == 303, resp.text
        page = c.get("orgs/acme/policy")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and found
        return c.cookies[COOKIE], found[1]


def accepted(ui: str, cookie: str) -> bool:
    resp = httpx.get(ui, cookies={COOKIE: cookie}, timeout=30)
    assert resp.status_code in (200, 303), resp.status_code
    return resp.status_code == 200


def refused_within(ui: str, cookie: str, seconds: float) -> float:
    """Poll until ``ui`` refuses ``cookie``; how long that took (fails after ``seconds``)."""
    start = time.monotonic()
    while accepted(ui, cookie):
        assert time.monotonic() - start < seconds, f"still accepted after {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_signed_out_cookie_is_refused_by_another_proxy_and_after_a_restart(
        start_console: Callable[..., Console]) -> None:
    first, second = start_console(), start_console()  # one store (file or schema)
    cookie, csrf = sign_in(first.ui)
    kept, _ = sign_in(second.ui)
    assert accepted(second.ui, cookie) and accepted(first.ui, kept)
    resp = httpx.post(first.ui + "logout", data={"csrf": csrf}, cookies={COOKIE: cookie},
                      timeout=30)
    assert resp.status_code == 303
    assert not accepted(first.ui, cookie)  # at once where it was signed out
    refused_within(second.ui, cookie, WITHIN_S)
    assert httpx.post(second.ui + "orgs/acme/policy/clear", data={"csrf": csrf},
                      cookies={COOKIE: cookie}, timeout=30).status_code == 403
    assert accepted(second.ui, kept)  # other sessions live on
    first.h.stop()
    second.h.stop()
    restarted = start_console()
    assert not accepted(restarted.ui, cookie)  # read from the store before serving
    assert accepted(restarted.ui, kept)


def test_sign_out_purges_sessions_that_expired(console: Console) -> None:
    store = console.h.state.store
    store.atomic(lambda tx: tx.execute(
        "INSERT INTO console_signouts (nonce, expires_at) VALUES ('old', 1)"))
    cookie, csrf = sign_in(console.ui)
    assert httpx.post(console.ui + "logout", data={"csrf": csrf}, cookies={COOKIE: cookie},
                      timeout=30).status_code == 303
    assert [r[0] for r in store.read("SELECT nonce FROM console_signouts")] == [
        cookie.split(".")[1]]
