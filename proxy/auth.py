"""Who is calling: turn the ``Authorization`` header into a ``Principal``.

Key lookups are cached in memory. The cache is checked against the store's ``keys_version``
counter (moved by every key write of any process: the CLI, another replica), at most every
``CHECK_EVERY_S`` and at once after a key write of this process: a key revoked in this process
is refused on the very next request, one revoked by another process within 50 ms, and a
request normally costs one dictionary lookup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from proxy.errors import ApiError
from proxy.store import Store, hash_key

DEFAULT_ORG = "default"
CHECK_EVERY_S = 0.05  # how stale the key cache may be for another process's writes


@dataclass(frozen=True)
class Principal:
    """Who calls. ``namespace`` scopes the caller's conversations (their dividers, spills and
    summaries): the organization for issued and bound keys; for an unbound passthrough key, a
    namespace of that key alone (by its hash), so two such keys never see each other's."""

    org: str
    user: str | None
    key_id: str | None
    upstream_key: str | None  # what is sent upstream as the bearer token
    namespace: str = ""

    def __post_init__(self) -> None:
        if not self.namespace:
            object.__setattr__(self, "namespace", self.org)

    def __repr__(self) -> str:  # never print a key
        return f"Principal(org={self.org!r}, user={self.user!r}, key_id={self.key_id!r})"


def bearer_token(request: web.Request) -> str | None:
    """The caller's key: ``Authorization: Bearer <key>``, else ``x-api-key: <key>`` (how the
    Anthropic SDKs and Claude Code send it)."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    other = request.headers.get("x-api-key", "").strip()
    return other or None


class Authenticator:
    def __init__(self, store: Store, mode: str, upstream_key: str | None) -> None:
        self.store = store
        self.mode = mode
        self.upstream_key = upstream_key
        self._cache: dict[str, Principal | None] = {}
        self._keys_version = -1
        self._checked = float("-inf")
        self._writes = -1

    def _fresh_cache(self) -> dict[str, Principal | None]:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY_S and self._writes == self.store.key_writes:
            return self._cache
        self._checked, self._writes = now, self.store.key_writes
        kv = self.store.keys_version()
        if kv != self._keys_version:
            self._keys_version = kv
            self._cache.clear()
        return self._cache

    def _resolve(self, token: str, digest: str) -> Principal | None:
        rec = self.store.find_key(digest)
        if self.mode == "passthrough":
            # The client's own key goes upstream; a binding only chooses the organization.
            if rec is None:
                return Principal(DEFAULT_ORG, None, None, token,
                                 namespace=f"{DEFAULT_ORG}/key:{digest[:32]}")
            return None if rec.revoked_at else Principal(rec.org, rec.user, rec.id, token)
        if rec is None or rec.revoked_at is not None or rec.kind != "proxy":
            return None
        return Principal(rec.org, rec.user, rec.id, self.upstream_key)

    def authenticate(self, request: web.Request) -> Principal:
        """Return the caller or raise a 401 ``ApiError``."""
        token = bearer_token(request)
        if token is None:
            raise ApiError(401, "Missing API key: send 'Authorization: Bearer <key>' "
                           "(or 'x-api-key: <key>').",
                           code="missing_api_key")
        cache = self._fresh_cache()
        # Keyed by the key itself: it is in this process's memory anyway (the request holds
        # it), and a hit then costs no SHA-256.
        if token in cache:
            principal = cache[token]
        else:
            principal = self._resolve(token, hash_key(token))
            if len(cache) >= 100_000:
                cache.clear()
            cache[token] = principal
        if principal is None:
            raise ApiError(401, "Invalid or revoked API key.", code="invalid_api_key")
        return principal
