"""Who is calling: turn the ``Authorization`` header into a ``Principal``.

Key lookups are cached in memory. The cache is checked against the store's ``keys_version``
counter (moved by every key write of any process: the CLI, another replica), at most every
``CHECK_EVERY_S`` and at once after a key write of this process: a key revoked in this process
is refused on the very next request, one revoked by another process within 50 ms, and a
request normally costs one dictionary lookup. Every store read runs off the event loop
(``Store.run``), one version check at a time.

While the store is unreachable the cache is kept: a key validated within the grace
(``CONTEXT_PROXY_KEY_GRACE_S``, default 600 s: found valid, or used while the store answered)
is still served; any other key gets 503 ``store_unavailable`` at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from proxy.errors import ApiError
from proxy.store import Store, StoreUnavailable
from proxy.store.keys import KeyRecord, hash_key

DEFAULT_ORG = "default"
CHECK_EVERY_S = 0.05  # how stale the key cache may be for another process's writes
DEFAULT_KEY_GRACE_S = 600.0


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


CHUNK = 500  # keys per statement when the cached ones are checked again


@dataclass
class _Entry:
    principal: Principal | None  # None: the key is unknown or revoked (401)
    validated_at: float  # monotonic: when the store last vouched for it
    digest: str



class Authenticator:
    def __init__(self, store: Store, mode: str, upstream_key: str | None,
                 grace_s: float = DEFAULT_KEY_GRACE_S) -> None:
        self.store = store
        self.mode = mode
        self.upstream_key = upstream_key
        self.grace_s = grace_s
        self._cache: dict[str, _Entry] = {}
        self._keys_version = -1
        self._checked = float("-inf")
        self._confirmed = float("-inf")  # the last time the store answered the version check
        self._writes = -1
        self._check: asyncio.Future[bool] | None = None

    async def _fresh_cache(self) -> dict[str, _Entry]:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY_S and self._writes == self.store.keys.writes:
            return self._cache
        if self._check is None:  # one check in flight; concurrent requests share it
            self._check = asyncio.ensure_future(self._check_version(now))
        check = self._check
        # A check the store is slow to answer goes on in its task; the request does not wait
        # past the store's deadline for it (the cache stands meanwhile).
        done, _ = await asyncio.wait({check}, timeout=self.store.deadline_s)
        if check in done and check.result():  # it failed after waiting out its deadline
            self.store.late_here()
        return self._cache

    async def _check_version(self, now: float) -> bool:
        """Check the keys' version (and the cached keys when it moved); True when the store
        was late to answer."""
        try:
            self._checked, writes = now, self.store.keys.writes
            kv = await self.store.run(self.store.keys.version)
            if kv != self._keys_version:
                await self._revalidate(kv)
            self._writes, self._confirmed = writes, time.monotonic()
        except StoreUnavailable as e:
            return e.late  # the cache stands; entries past the grace are refused (``_vouched``)
        finally:
            self._check = None
        return False

    async def _revalidate(self, kv: int) -> None:
        """After key writes (by any process): read the keys changed since the last check and
        resolve again the cached entries among them. Each write changes one key and moves the
        version by one; when the counts disagree (a key written twice, a writer that does not
        mark its key), every cached key is checked instead (``_revalidate_all``). The cache is
        never emptied: a key write elsewhere must not leave the keys an outage relies on
        unvouched for."""
        if self._keys_version < 0:
            await self._revalidate_all(kv)
            return
        now_kv, changed = await self.store.run(self.store.keys.changed_since, self._keys_version)
        if now_kv - self._keys_version != len(changed):
            await self._revalidate_all(now_kv)
            return
        if changed:
            tokens = {e.digest: t for t, e in self._cache.items()}
            now = time.monotonic()
            for digest, rec in changed:
                token = tokens.get(digest)
                if token is not None:
                    self._cache[token] = _Entry(self._resolve(rec, token, digest), now, digest)
        self._keys_version = now_kv

    async def _revalidate_all(self, kv: int) -> None:
        """Check every cached valid key again, in a few reads, and forget the unknown ones."""
        valid = {e.digest: t for t, e in self._cache.items() if e.principal is not None}
        found = await self.store.run(self._find_keys, list(valid))
        now = time.monotonic()
        self._cache = {token: _Entry(self._resolve(found.get(digest), token, digest), now,
                                     digest) for digest, token in valid.items()}
        self._keys_version = kv

    def _find_keys(self, digests: list[str]) -> dict[str, KeyRecord]:
        """The stored records of ``digests`` (on a reader thread)."""
        out: dict[str, KeyRecord] = {}
        for i in range(0, len(digests), CHUNK):
            chunk = digests[i:i + CHUNK]
            for rec_hash, rec in self.store.keys.find_many(chunk):
                out[rec_hash] = rec
        return out

    def _resolve(self, rec: KeyRecord | None, token: str, digest: str) -> Principal | None:
        if self.mode == "passthrough":
            # The client's own key goes upstream; a binding only chooses the organization.
            if rec is None:
                return Principal(DEFAULT_ORG, None, None, token,
                                 namespace=f"{DEFAULT_ORG}/key:{digest[:32]}")
            return None if rec.revoked_at else Principal(rec.org, rec.user, rec.id, token)
        if rec is None or rec.revoked_at is not None or rec.kind != "proxy":
            return None
        return Principal(rec.org, rec.user, rec.id, self.upstream_key)

    def _vouched(self, entry: _Entry) -> Principal | None:
        """The cached answer, while the store vouches for it or within the grace after."""
        now = time.monotonic()
        if self.store.up and now - self._confirmed < 1.0:
            entry.validated_at = now
        elif now - entry.validated_at > self.grace_s:
            raise StoreUnavailable("key not validated within the grace")
        return entry.principal

    async def authenticate(self, request: web.Request) -> Principal:
        """Return the caller or raise a 401 ``ApiError`` (503 ``StoreUnavailable``: a key the
        store cannot check now and has not vouched for within the grace)."""
        token = bearer_token(request)
        if token is None:
            raise ApiError(401, "Missing API key: send 'Authorization: Bearer <key>' "
                           "(or 'x-api-key: <key>').",
                           code="missing_api_key")
        cache = self._cache if time.monotonic() - self._checked < CHECK_EVERY_S and \
            self._writes == self.store.keys.writes else await self._fresh_cache()
        # Keyed by the key itself: it is in this process's memory anyway (the request holds
        # it), and a hit then costs no SHA-256.
        entry = cache.get(token)
        if entry is not None:
            principal = self._vouched(entry)
        else:
            digest = hash_key(token)
            rec = await self.store.run(self.store.keys.find, digest)
            principal = self._resolve(rec, token, digest)
            if len(cache) >= 100_000:
                cache.clear()
            cache[token] = _Entry(principal, time.monotonic(), digest)
        if principal is None:
            raise ApiError(401, "Invalid or revoked API key.", code="invalid_api_key")
        return principal
