"""Console sessions and CSRF tokens, signed with a key derived from the admin token.

A session is a cookie ``<expiry>.<nonce>.<signature>`` (HttpOnly, SameSite=Strict, Path
``/admin/ui/``, Max-Age = the session's life; Secure over TLS). Nothing is stored server-side
except the nonces of sessions signed out before their expiry (in the store, read into memory by
``proxy.console.signouts``), so a cookie made by one replica is good on another, a signed-out
one is refused by all, and changing the admin token ends every session at once. A form's CSRF
token is an HMAC of the session's nonce: it holds for that session only, and is stale once the
session ends.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

COOKIE = "context_proxy_console"
PATH = "/admin/ui/"
SESSION_TTL_S = 8 * 3600
_MAX_REVOKED = 10_000


@dataclass(frozen=True)
class Session:
    nonce: str
    expires_at: int


class Sessions:
    """Issue, check and end sessions; make and check CSRF tokens."""

    def __init__(self, admin_token: str, ttl_s: int = SESSION_TTL_S) -> None:
        self._token = admin_token.encode()
        self._key = hmac.new(self._token, b"context-proxy console session v1",
                             hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self._revoked: dict[str, int] = {}  # nonce -> expiry, until it would have expired

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def admin_token_matches(self, given: str) -> bool:
        """Constant-time comparison with the configured admin token."""
        return hmac.compare_digest(given.encode(), self._token)

    def issue(self, now: float | None = None) -> tuple[str, Session]:
        """A new session: the cookie value and the session."""
        expires = int(time.time() if now is None else now) + self.ttl_s
        nonce = secrets.token_urlsafe(18)
        body = f"{expires}.{nonce}"
        return f"{body}.{self._sign(body)}", Session(nonce, expires)

    def check(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie names, or ``None`` when it is missing, forged, expired or
        signed out."""
        if not cookie or cookie.count(".") != 2:
            return None
        expires_text, nonce, signature = cookie.split(".")
        if not hmac.compare_digest(signature, self._sign(f"{expires_text}.{nonce}")):
            return None
        try:
            expires = int(expires_text)
        except ValueError:
            return None
        if expires <= (time.time() if now is None else now) or nonce in self._revoked:
            return None
        return Session(nonce, expires)

    def csrf_token(self, session: Session) -> str:
        return self._sign(f"csrf.{session.nonce}")

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given), self.csrf_token(session))

    def end(self, session: Session) -> None:
        """Sign a session out here: its cookie and CSRF token are refused from now on (the
        store's record of it is ``proxy.console.signouts``' business)."""
        now = int(time.time())
        if len(self._revoked) >= _MAX_REVOKED:
            self._revoked = {n: e for n, e in self._revoked.items() if e > now}
        self._revoked[session.nonce] = session.expires_at

    def adopt(self, revoked: dict[str, int]) -> None:
        """Take the sign-outs read from the store. A sign-out is never undone, so the ones
        already known stay until they expire (one made here while the store was read is kept)."""
        now = int(time.time())
        self._revoked = {**{n: e for n, e in self._revoked.items() if e > now}, **revoked}
