"""Console sessions across processes (SPEC section 10): a sign-out is recorded in the store, so
another proxy on the same store refuses the cookie within 2 s, and so does a restarted one."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx
import pytest
from console_support import TOKEN, Console

from proxy.console.session import COOKIE
from proxy.console.throttle import SignInThrottle
from proxy.testing.scrape import metric, scrape

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


def test_wrong_sign_ins_are_throttled_and_then_even_the_right_token_waits(
        console: Console, caplog: pytest.LogCaptureFixture) -> None:
    with httpx.Client(base_url=console.ui, timeout=30) as c:
        statuses = [c.post("login", data={"token": f"wrong-{i}"}).status_code
                    for i in range(100)]
        assert statuses[0] == 401 and statuses[-1] == 429
        assert set(statuses) == {401, 429}
        refused = c.post("login", data={"token": TOKEN})  # the right token: still 429
        assert refused.status_code == 429 and "set-cookie" not in refused.headers
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert "Try again in" in refused.text
    warnings = [r for r in caplog.records if "console sign-in throttled" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    throttled = metric(scrape(console.base, timeout=30),
                       "context_proxy_console_signins_throttled_total", scope="address")
    assert throttled == statuses.count(429) + 1


def test_forwarded_addresses_count_only_from_a_trusted_front_end(
        start_console: Callable[..., Console]) -> None:
    behind = start_console(CONTEXT_PROXY_TRUSTED_PROXIES="127.0.0.1")
    with httpx.Client(base_url=behind.ui, timeout=30) as c:
        for _ in range(20):
            c.post("login", data={"token": "wrong"}, headers={"X-Forwarded-For": "203.0.113.7"})
        assert c.post("login", data={"token": "wrong"}, headers={
            "X-Forwarded-For": "203.0.113.7"}).status_code == 429
        # Another client behind the same front end is not held up by the first one's guesses.
        assert c.post("login", data={"token": TOKEN}, headers={
            "X-Forwarded-For": "198.51.100.1, 127.0.0.1"}).status_code == 303
    direct = start_console(CONTEXT_PROXY_TRUSTED_PROXIES="10.0.0.0/8")
    with httpx.Client(base_url=direct.ui, timeout=30) as c:  # a made-up address each time
        statuses = [c.post("login", data={"token": "wrong"}, headers={
            "X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(20)]
        assert statuses[-1] == 429


@pytest.mark.parametrize(("trusted", "secure"), [("127.0.0.1", True), ("10.0.0.0/8, ::1", False),
                                                 ("", False)])
def test_the_cookie_is_secure_behind_a_trusted_tls_front_end(
        start_console: Callable[..., Console], trusted: str, secure: bool) -> None:
    console = start_console(CONTEXT_PROXY_TRUSTED_PROXIES=trusted)
    resp = httpx.post(console.ui + "login", data={"token": TOKEN}, timeout=30,
                      headers={"X-Forwarded-Proto": "https"})
    assert resp.status_code == 303
    attributes = {a.strip().lower() for a in resp.headers["set-cookie"].split(";")[1:]}
    assert ("secure" in attributes) is secure
    plain = httpx.post(console.ui + "login", data={"token": TOKEN}, timeout=30)
    assert "secure" not in plain.headers["set-cookie"].lower()


def test_throttle_refills_counts_ipv6_by_its_64_and_has_a_total() -> None:
    t = SignInThrottle(per_address=(3, 6.0), total=(5, 100.0))
    for _ in range(3):
        assert t.refused("2001:db8::1", now=0.0) is None
        t.wrong_token("2001:db8::1", now=0.0)
    assert t.refused("2001:db8::ffff", now=0.0) == ("address", 6)  # the same /64
    assert t.refused("2001:db8::1", now=3.0) == ("address", 3)
    assert t.refused("2001:db8::1", now=6.0) is None  # one more try after 6 s
    t.wrong_token("192.0.2.1", now=6.0)
    t.wrong_token("192.0.2.2", now=6.0)
    assert t.refused("192.0.2.3", now=6.0) == ("total", 94)  # 5 wrong from all: paused
    assert t.refused("192.0.2.3", now=100.0) is None
