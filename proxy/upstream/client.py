"""The upstream connection: one shared ``ClientSession``, header hygiene and fault mapping.

Faults become ``ApiError``: a refused or broken connection is 502, no first byte within
``CONTEXT_PROXY_UPSTREAM_TIMEOUT_S`` is 504. The upstream key is only ever placed in the outgoing
``Authorization`` header and scrubbed from any error body relayed back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.errors import ApiError
from proxy.metrics import Metrics

# RFC 9110 hop-by-hop headers plus those aiohttp recomputes for each leg.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length",
})
_CLIENT_ONLY = frozenset({"authorization", "x-api-key", "cookie"})
# Request headers the proxy consumes (SPEC section 2): they name a team's conversations (ticket
# ids, user names) and ask things of the proxy, so the provider never sees them. The platform may
# opt in to forward the conversation id (``forwarding_conversation_id``) for providers using it.
CONVERSATION_HEADER = "X-Conversation-Id"
CONSUMED_PREFIX = "x-context-"
# Request credentials an upstream (or a proxy in front of it) may echo in its answer: never
# relayed to a client, whatever the route.
_ECHOED_CREDENTIALS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


def request_headers(incoming: Mapping[str, str], upstream_key: str | None,
                    identity: bool = False) -> CIMultiDict[str]:
    """Headers to send upstream: the client's, minus hop-by-hop, credentials and the headers the
    proxy consumes (``X-Conversation-Id``, ``X-Context-*``), plus ours."""
    out: CIMultiDict[str] = CIMultiDict()
    connection_tokens = {t.strip().lower() for t in incoming.get("Connection", "").split(",")}
    for name, value in incoming.items():
        low = name.lower()
        if low in HOP_BY_HOP or low in _CLIENT_ONLY or low in connection_tokens \
                or low.startswith(CONSUMED_PREFIX) or low == "x-conversation-id":
            continue
        if identity and low in ("accept-encoding", "content-encoding"):
            continue  # a managed call: the proxy decoded the client's body and reads the answer
        out.add(name, value)
    if identity:
        out["Accept-Encoding"] = "identity"
    if upstream_key:
        out["Authorization"] = f"Bearer {upstream_key}"
    return out


def forwarding_conversation_id(out: CIMultiDict[str], incoming: Mapping[str, str],
                               forward: bool) -> CIMultiDict[str]:
    """``out`` (what ``request_headers`` made of ``incoming``) with the client's
    ``X-Conversation-Id`` put back when the platform opts in to ``forward`` it."""
    value = incoming.get(CONVERSATION_HEADER) if forward else None
    if value is not None:
        out[CONVERSATION_HEADER] = value
    return out


def response_headers(upstream: CIMultiDictProxy[str], drop: Iterable[str] = (),
                     secret: str | None = None) -> CIMultiDict[str]:
    """Headers to relay to the client: the upstream's, minus hop-by-hop ones, any echo of a
    request credential and any header whose value holds ``secret`` (the upstream key)."""
    skip = HOP_BY_HOP | _ECHOED_CREDENTIALS | {d.lower() for d in drop}
    connection_tokens = {t.strip().lower() for t in upstream.get("Connection", "").split(",")}
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        low = name.lower()
        if low not in skip and low not in connection_tokens and \
                not (secret and secret in value):
            out.add(name, value)
    return out


class Upstream:
    """The shared client towards the configured OpenAI-compatible base URL (ending in /v1)."""

    def __init__(self, base_url: str, api_key: str | None, first_byte_timeout_s: float,
                 metrics: Metrics | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.first_byte_timeout_s = first_byte_timeout_s
        self.metrics = metrics  # time to first byte and errors of every call, when given
        self._session: aiohttp.ClientSession | None = None
        self.streams: set[aiohttp.ClientResponse] = set()  # answers being relayed as they come
        self.stopping = False  # shutting down: what still waits is answered 503 (end_waits)
        self._closing: asyncio.Future[None] | None = None

    def end_waits(self) -> None:
        """Shutting down: every request still waiting for the upstream (its headers or its whole
        body) ends now, as the ``SHUTTING_DOWN`` 503 (a client may retry it elsewhere), and so
        does any request made after this."""
        self.stopping = True
        if self._session is not None and self._session.connector is not None:
            closing = self._session.connector.close()
            if closing is not None:  # kept: a task nobody holds may be collected unfinished
                self._closing = asyncio.ensure_future(closing)

    def shutting_down(self) -> ApiError:
        return ApiError(503, "The proxy is shutting down: send the request again.",
                        code="shutting_down", type_="server_error")

    def end_streams(self) -> int:
        """Close every upstream answer being relayed as a stream: each relay then ends its
        client's stream as a broken upstream's (an SSE error event). For shutting down."""
        ended = list(self.streams)
        for resp in ended:
            resp.close()
        return len(ended)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30,
                                              sock_read=self.first_byte_timeout_s),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, path: str) -> str:
        """``path`` is relative to /v1, e.g. ``/chat/completions``."""
        return self.base_url + path

    async def open(self, method: str, path: str, headers: Mapping[str, str],
                   data: object = None, query: str = "", route: str = "relay"
                   ) -> aiohttp.ClientResponse:
        """Send a request and return once the response headers arrived (caller releases it).
        ``route`` labels the call in the metrics: the proxy route it serves, or ``summary``."""
        url = self.url(path) + (f"?{query}" if query else "")
        start = time.perf_counter()
        try:
            # The session's sock_read timeout bounds the wait for the response headers (and
            # every later read): no timer of its own per request.
            resp = await self.session.request(method, url, headers=headers, data=data,
                                              allow_redirects=False)
        except TimeoutError:
            self._failed(route, "timeout")
            raise ApiError(504, "The upstream model did not answer in time.",
                           code="upstream_timeout") from None
        except aiohttp.ClientError as e:
            if self.stopping:
                raise self.shutting_down() from None
            self._failed(route, "unreachable")
            raise ApiError(502, f"Could not reach the upstream model: {type(e).__name__}.",
                           code="upstream_unreachable") from None
        if self.metrics is not None:
            self.metrics.upstream_answered(route, resp.status, time.perf_counter() - start)
        return resp

    def _failed(self, route: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.upstream_failed(route, status)

    @property
    def secret(self) -> bytes | None:
        """The upstream key as bytes, for scrubbing what is relayed (``None``: no key)."""
        return self.api_key.encode() if self.api_key else None


# The key of the request being served: lets a passthrough deployment (no key of its own) ask
# the upstream's /v1/models with the caller's key.
current_key: ContextVar[str | None] = ContextVar("current_upstream_key", default=None)


async def fetch_models(upstream: Upstream) -> Any:
    """The upstream's ``GET /v1/models`` JSON; raises on any failure (the caller caches that)."""
    key = upstream.api_key or current_key.get()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    resp = await upstream.open("GET", "/models", headers, route="models")
    try:
        if resp.status != 200:
            raise RuntimeError(f"upstream /v1/models answered {resp.status}")
        return await resp.json(content_type=None)
    finally:
        resp.release()
