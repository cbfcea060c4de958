"""Every ``/v1/*`` route other than chat completions: relayed unchanged, streaming both ways."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web
from multidict import CIMultiDict

from proxy.apis import APIS
from proxy.state import STATE
from proxy.upstream.client import Upstream, forwarding_conversation_id, request_headers
from proxy.upstream.relay import relay


async def _body_chunks(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(1 << 16):
        yield chunk


async def relay_any(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    principal = await state.auth.authenticate(request)
    forward = state.settings.forward_conversation_id
    if request.match_info["tail"].startswith("messages/"):
        # Anthropic's other Messages paths (count_tokens, batches): its upstream, its key.
        api = APIS["messages"]
        return await _relay_to(request, state.upstream_of(api), forwarding_conversation_id(
            api.headers(request.headers, state.upstream_key(api, principal)), request.headers,
            forward))
    return await _relay_to(request, state.upstream, forwarding_conversation_id(
        request_headers(request.headers, principal.upstream_key), request.headers, forward))


async def _relay_to(request: web.Request, upstream: Upstream, headers: CIMultiDict[str]
                    ) -> web.StreamResponse:
    coding = request.headers.get("Content-Encoding")
    if coding is not None:  # the client's bytes go as they came (the server decodes none)
        headers["Content-Encoding"] = coding
    data: object = None
    if request.body_exists:
        length = request.content_length
        # Small bodies go with a Content-Length (some upstreams refuse chunked uploads);
        # anything else (file uploads) streams through without being held in memory.
        data = await request.read() if length is not None and length <= (1 << 20) \
            else _body_chunks(request)
    resp = await upstream.open(request.method, "/" + request.match_info["tail"],
                               headers, data, request.query_string)
    try:
        return await relay(request, upstream, resp)
    finally:
        resp.release()


def add_routes(app: web.Application) -> None:
    """The catch-all ``/v1/*`` relay; register it after every specific ``/v1`` route."""
    app.router.add_route("*", "/v1/{tail:.*}", relay_any, name="relay")
