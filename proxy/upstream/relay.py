"""Relaying upstream answers to the client: whole bodies, and streams chunk by chunk.

A stream is never buffered: each chunk is written to the client as it arrives. When the upstream
breaks mid-stream (after the client already has a 200), an SSE stream gets a final
``data: {"error": ...}`` event so SDKs raise instead of silently truncating.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

from proxy.upstream.client import Upstream, response_headers

log = logging.getLogger("context_proxy.relay")

SMALL_BODY = 1 << 20


def is_event_stream(resp: aiohttp.ClientResponse) -> bool:
    return resp.headers.get("Content-Type", "").startswith("text/event-stream")


async def relay_whole(upstream: Upstream, resp: aiohttp.ClientResponse,
                      extra_headers: Mapping[str, str] | None = None) -> web.Response:
    """Read the (small) upstream body and answer it; error bodies are scrubbed of the key."""
    body = await resp.read()
    if resp.status >= 400:
        body = upstream.scrub(body)
    headers = response_headers(resp.headers)
    if extra_headers:
        headers.update(extra_headers)
    return web.Response(status=resp.status, body=body, headers=headers)


async def relay_stream(request: web.Request, resp: aiohttp.ClientResponse,
                       extra_headers: Mapping[str, str] | None = None,
                       preamble: bytes = b"",
                       on_chunk: Callable[[bytes], None] | None = None) -> web.StreamResponse:
    """Relay the upstream body chunk by chunk as it arrives; ``preamble`` is written first and
    ``on_chunk`` sees each chunk (after it was written)."""
    headers = response_headers(resp.headers)
    if extra_headers:
        headers.update(extra_headers)
    out = web.StreamResponse(status=resp.status, headers=headers)
    await out.prepare(request)
    if preamble:
        await out.write(preamble)
    while True:
        try:
            chunk = await resp.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as e:
            log.warning("upstream stream broke on %s: %s", request.path, type(e).__name__)
            resp.close()
            if is_event_stream(resp):
                await _write_quietly(out, _STREAM_ERROR)
            return out
        if not chunk:
            break
        try:
            await out.write(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
        except ConnectionResetError:
            # The client went away: stop the upstream generating for nobody.
            resp.close()
            return out
    await out.write_eof()
    return out


_STREAM_ERROR = b"data: " + json.dumps({"error": {
    "message": "The upstream stream ended unexpectedly.", "type": "upstream_error",
    "param": None, "code": "upstream_broken"}}).encode() + b"\n\n"


async def _write_quietly(out: web.StreamResponse, data: bytes) -> None:
    try:
        await out.write(data)
        await out.write_eof()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
        pass


async def relay(request: web.Request, upstream: Upstream, resp: aiohttp.ClientResponse
                ) -> web.StreamResponse:
    """Relay any upstream answer: small bodies whole, anything else streamed."""
    length = resp.headers.get("Content-Length")
    if request.method == "HEAD" or (length is not None and length.isdigit()
                                    and int(length) <= SMALL_BODY and not is_event_stream(resp)):
        return await relay_whole(upstream, resp)
    return await relay_stream(request, resp)
