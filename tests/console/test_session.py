"""Console sessions and CSRF tokens (``proxy.console.session``): signed with a key of the admin
token, refused when forged, expired or signed out, the CSRF token good for its session only."""

from __future__ import annotations

from proxy.console.session import Session, Sessions

NOW = 1_700_000_000


def test_an_issued_cookie_checks_until_it_expires() -> None:
    sessions = Sessions("admin-token-" + "x" * 20, ttl_s=3600)
    cookie, session = sessions.issue(now=NOW)
    assert session.expires_at == NOW + 3600 and cookie.count(".") == 2
    assert sessions.check(cookie, now=NOW + 10) == session
    assert sessions.check(cookie, now=NOW + 3600) is None


def test_forged_malformed_or_foreign_cookies_are_refused() -> None:
    sessions = Sessions("token-a" * 4)
    cookie, _ = sessions.issue(now=NOW)
    expires, nonce, sig = cookie.split(".")
    for bad in (None, "", "a.b", f"{int(expires) + 99}.{nonce}.{sig}", f"{expires}.{nonce}.0",
                f"x.{nonce}.{sig}"):
        assert sessions.check(bad, now=NOW) is None
    assert Sessions("token-b" * 4).check(cookie, now=NOW) is None  # another admin token


def test_csrf_tokens_belong_to_one_session_and_signing_out_ends_both() -> None:
    sessions = Sessions("t" * 32)
    cookie, session = sessions.issue()
    _, other = sessions.issue()
    token = sessions.csrf_token(session)
    assert sessions.csrf_ok(session, token) and not sessions.csrf_ok(other, token)
    assert not sessions.csrf_ok(session, None) and not sessions.csrf_ok(session, "")
    sessions.end(session)
    assert sessions.check(cookie) is None


def test_sign_outs_read_from_the_store_are_adopted_and_never_undone() -> None:
    sessions = Sessions("t" * 32)
    cookie, session = sessions.issue()
    mine, here = sessions.issue()
    sessions.end(here)
    sessions.adopt({session.nonce: session.expires_at})
    assert sessions.check(cookie) is None and sessions.check(mine) is None
    assert sessions.admin_token_matches("t" * 32) and not sessions.admin_token_matches("t")
    assert isinstance(session, Session)
