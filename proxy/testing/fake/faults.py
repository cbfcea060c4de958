"""Scripted misbehaviour of the fake upstream (``proxy.testing.fake_upstream``): ``Fault`` and
the helpers that answer, shape or cut a response as a fault says."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Fault:
    """One scripted misbehaviour of ``path``; ``match`` picks which requests it applies to.

    ``mode`` shapes the answer. "html", "text", "invalid_json": a page of that kind (an HTML
    error page, plain text, JSON that does not parse) with ``status``. "reset": the Content-Length
    promises the whole body, half is sent, the connection closed (a stream: after its first
    event). "truncated_json": a complete answer holding half the JSON. "drip": the body written
    in pieces of ``DRIP_BYTES``, ``DRIP_PAUSE_S`` apart. "bad_sse": a stream with a data line
    that is not JSON after its first event. "early_end": a stream whose body ends cleanly after
    its first event, without the API's final one. "huge": a chat answer of ``HUGE_CHARS``
    characters.
    "reset", "truncated_json" and "drip" shape the normal answer when ``status`` is 200 and no
    ``body`` is given, else the error body; "" (no mode) answers ``body`` (JSON) as before.
    "echo_gzip_stream": a gzip-compressed chat stream that echoes the key in its first event.
    "echo", "echo_drip", "echo_gzip", "echo_huge": an answer that echoes the request's key in a
    header and in its JSON body (a chat completion for a 200 on chat), whole, written in pieces
    of a few bytes, gzip-compressed, or padded past ``HUGE_CHARS``.
    """

    status: int = 500
    body: Any = None  # JSON-able; default an OpenAI-shaped error
    delay_s: float = 0.0  # before the response headers
    drop: bool = False  # close the connection without answering
    times: int = 1  # how many matching requests it applies to (-1: forever)
    match: Callable[[dict[str, Any]], bool] | None = None
    mode: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # added to the answer (Retry-After)
    path: str = "/v1/chat/completions"  # or "/v1/models", "/v1/embeddings"


DEFAULT_ERROR = {"error": {"message": "fake upstream fault", "type": "server_error",
                           "param": None, "code": None}}
PAGES = {"html": ("text/html", "<!DOCTYPE html><html><head><title>502 Bad Gateway</title>"
                  "</head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>"),
         "text": ("text/plain", "upstream connect error or disconnect/reset before headers"),
         "invalid_json": ("application/json", '{"id": "chatcmpl-fake", "choices": [oops]}')}
BAD_EVENT = b"data: <html>not json</html>\n\n"
DRIP_BYTES, DRIP_PAUSE_S, HUGE_CHARS = 16, 0.002, 3 << 20


async def misbehave(request: web.Request, fault: Fault) -> web.StreamResponse | None:
    """The answer ``fault`` scripts, or None when the normal answer goes out (shaped later)."""
    if fault.delay_s:
        await asyncio.sleep(fault.delay_s)
    if fault.drop:
        return cut(request, web.Response())
    if fault.mode.startswith("echo"):
        return await echo(request, fault)
    if fault.mode in PAGES:
        content_type, text = PAGES[fault.mode]
        return web.Response(status=fault.status, text=text, content_type=content_type,
                            headers=fault.headers)
    if fault.status == 200 and fault.body is None:
        return None
    err = fault.body if fault.body is not None else DEFAULT_ERROR
    if fault.mode in ("reset", "truncated_json", "drip"):
        return await send(request, json.dumps(err).encode(), fault.status, fault)
    return web.json_response(err, status=fault.status, headers=fault.headers)


async def answer_json(request: web.Request, payload: Any, fault: Fault | None
                      ) -> web.StreamResponse:
    """A normal JSON answer, shaped by ``fault`` when it says so (reset, truncated_json, drip)."""
    if fault is None or fault.mode not in ("reset", "truncated_json", "drip"):
        return web.json_response(payload, headers=fault.headers if fault else None)
    return await send(request, json.dumps(payload).encode(), 200, fault)


async def send(request: web.Request, data: bytes, status: int, fault: Fault
                ) -> web.StreamResponse:
    """``data`` as a JSON answer shaped by ``fault.mode`` (reset, truncated_json, drip)."""
    if fault.mode == "truncated_json":
        data = data[:len(data) // 2]
    resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json",
                                                      **fault.headers})
    resp.content_length = len(data)
    await resp.prepare(request)
    if fault.mode == "reset":
        await resp.write(data[:len(data) // 2])
        return cut(request, resp)
    await write(resp, data, fault.mode)
    await resp.write_eof()
    return resp


async def write(resp: web.StreamResponse, data: bytes, mode: str) -> None:
    step = DRIP_BYTES if mode == "drip" else max(1, len(data))
    for i in range(0, len(data), step):
        await resp.write(data[i:i + step])
        if mode == "drip":
            await asyncio.sleep(DRIP_PAUSE_S)


def cut(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """Close the connection (what was written still goes out first)."""
    assert request.transport is not None
    request.transport.close()
    return resp


async def echo_stream(request: web.Request, key: str) -> web.StreamResponse:
    """A gzip-compressed chat stream whose first event holds ``key``, one compressed piece per
    event (so each event is readable as it comes)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Content-Encoding": "gzip"})
    await resp.prepare(request)
    packer = zlib.compressobj(wbits=31)  # gzip framing
    chunk = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": f"you sent {key}"},
                          "finish_reason": None}]}
    for event in (b"data: " + json.dumps(chunk).encode() + b"\n\n", b"data: [DONE]\n\n"):
        await resp.write(packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH))
    await resp.write(packer.flush())
    await resp.write_eof()
    return resp


async def echo(request: web.Request, fault: Fault) -> web.StreamResponse:
    """An answer that gives the request's key away, shaped by ``fault.mode`` (see ``Fault``)."""
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if fault.mode == "echo_gzip_stream":
        return await echo_stream(request, key)
    if fault.status >= 400:
        payload: Any = {"error": {"message": f"invalid key {key}", "type": "auth_error",
                                  "param": None, "code": None}}
    elif request.path.endswith("/chat/completions"):
        payload = {"id": "chatcmpl-echo", "object": "chat.completion", "model": "m",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                       "role": "assistant", "content": f"you sent {key}"}}]}
    else:
        payload = {"object": "list", "data": [], "debug": {"authorization": key}}
    if fault.mode == "echo_huge":
        payload["padding"] = "x" * HUGE_CHARS
        payload["again"] = key  # the key after more than a MiB
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-Debug-Authorization": f"Bearer {key}"}
    if fault.mode == "echo_gzip":
        data, headers["Content-Encoding"] = gzip.compress(data), "gzip"
    resp = web.StreamResponse(status=fault.status, headers=headers)
    if fault.mode != "echo_drip":
        resp.content_length = len(data)
    await resp.prepare(request)
    step = 7 if fault.mode == "echo_drip" else len(data)  # a key split across many chunks
    for i in range(0, len(data), step):
        await resp.write(data[i:i + step])
    await resp.write_eof()
    return resp
