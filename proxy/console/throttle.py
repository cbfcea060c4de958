"""Console sign-in throttling and what a trusted front end says about a request (SPEC 9, 10).

Wrong tokens are counted in token buckets: one per client address (an IPv6 address counts by
its /64) and one for all addresses together. An empty bucket refuses every sign-in, the right
token included (otherwise the throttle would still tell a guesser when it guessed right), with
429 and ``Retry-After`` until the bucket holds a token again. The buckets live in the process:
with N replicas an address gets N times the rate.

The client's address and scheme come from the connection, unless its peer is one of
``CONTEXT_PROXY_TRUSTED_PROXIES``: then ``X-Forwarded-For`` (read from the right, past every
trusted hop) and ``X-Forwarded-Proto`` are believed. From any other peer both are ignored.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from proxy.settings import Network

PER_ADDRESS = (10, 6.0)  # burst, then one wrong token per this many seconds
TOTAL = (100, 0.6)  # all addresses together
_MAX_ADDRESSES = 10_000


def _trusted(address: str | None, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in net for net in trusted)


def client_address(request: web.Request, trusted: Sequence[Network]) -> str:
    """The client's address: the peer's, or what trusted front ends forwarded."""
    address = request.remote or "-"
    hops = [h.strip() for h in ",".join(request.headers.getall("X-Forwarded-For", [])).split(",")
            if h.strip()]
    while hops and _trusted(address, trusted):
        address = hops.pop()
    return address


def over_tls(request: web.Request, trusted: Sequence[Network]) -> bool:
    """Whether the request came over TLS: directly, or as a trusted front end says."""
    if request.secure:
        return True
    if not _trusted(request.remote, trusted):
        return False
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return proto == "https"


def _bucket_key(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass
class _Bucket:
    tokens: float
    at: float


class _Buckets:
    def __init__(self, burst: int, every_s: float) -> None:
        self.burst, self.every_s = burst, every_s
        self.buckets: dict[str, _Bucket] = {}

    def _level(self, key: str, now: float) -> _Bucket:
        b = self.buckets.get(key) or _Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + (now - b.at) / self.every_s)
        b.at = now
        return b

    def wait_s(self, key: str, now: float) -> float:
        """0 when a sign-in may be tried, else seconds until it may."""
        b = self._level(key, now)
        return 0.0 if b.tokens >= 1 else (1 - b.tokens) * self.every_s

    def spend(self, key: str, now: float) -> None:
        b = self._level(key, now)
        b.tokens = max(0.0, b.tokens - 1)
        self.buckets[key] = b
        if len(self.buckets) > _MAX_ADDRESSES:  # drop the full ones: they are the default
            self.buckets = {k: v for k, v in self.buckets.items()
                            if v.tokens + (now - v.at) / self.every_s < self.burst}


class SignInThrottle:
    def __init__(self, per_address: tuple[int, float] = PER_ADDRESS,
                 total: tuple[int, float] = TOTAL) -> None:
        self.addresses = _Buckets(*per_address)
        self.total = _Buckets(*total)

    def refused(self, address: str, now: float | None = None) -> tuple[str, int] | None:
        """``(scope, retry_after_s)`` when sign-in is refused now (scope ``address`` or
        ``total``), else None."""
        now = time.monotonic() if now is None else now
        for scope, buckets, key in (("address", self.addresses, _bucket_key(address)),
                                    ("total", self.total, "")):
            wait = buckets.wait_s(key, now)
            if wait > 0:
                return scope, max(1, math.ceil(wait))
        return None

    def wrong_token(self, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.addresses.spend(_bucket_key(address), now)
        self.total.spend("", now)
