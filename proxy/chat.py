"""``POST /v1/chat/completions``: authenticate, parse, run the context pipeline, relay."""

from __future__ import annotations

import time

from aiohttp import web

from proxy.app import STATE
from proxy.errors import ApiError
from proxy.relay import is_event_stream, relay_stream, relay_whole
from proxy.schema import check_chat_request, parse_json_object
from proxy.upstream import request_headers


async def read_body(request: web.Request, limit: int) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError(413, f"The request body is {length} bytes; this proxy accepts at most "
                       f"{limit}.", code="request_too_large")
    return await request.read()  # aiohttp enforces client_max_size when the length is unknown


async def chat_completions(request: web.Request) -> web.StreamResponse:
    start = time.perf_counter()
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = parse_json_object(raw)
    check_chat_request(body)
    headers = request_headers(request.headers, principal.upstream_key, identity=True)
    state.metrics.overhead.labels("chat").observe(time.perf_counter() - start)
    sent = time.perf_counter()
    resp = await state.upstream.open("POST", "/chat/completions", headers, raw)
    try:
        if body.get("stream") is True and resp.status == 200 and is_event_stream(resp):
            out = await relay_stream(request, resp)
        else:
            out = await relay_whole(state.upstream, resp)
    finally:
        resp.release()
        state.metrics.upstream_duration.labels("chat").observe(time.perf_counter() - sent)
    return out
