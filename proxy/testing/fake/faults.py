"""Scripted misbehaviour of the fake upstream (``proxy.testing.fake_upstream``): ``Fault`` and
the helpers that answer, shape or cut a response as a fault says."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
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
    "unframed_fin", "unframed_reset": an answer with neither a Content-Length nor chunked
    framing (its end is the connection's), cut after a stream's first event or half a JSON
    body, by a FIN (which looks like a clean end) or a reset.
    "echo_gzip_stream": a gzip-compressed stream of the request's API that echoes the key.
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


Echo = Callable[[web.Request, Fault], Awaitable[web.StreamResponse]]


async def misbehave(request: web.Request, fault: Fault, echo: Echo | None = None
                    ) -> web.StreamResponse | None:
    """The answer ``fault`` scripts, or None when the normal answer goes out (shaped later);
    ``echo`` answers the ``echo*`` modes (``proxy.testing.fake.echoes``: it speaks each API,
    whose module imports this one)."""
    if fault.delay_s:
        await asyncio.sleep(fault.delay_s)
    if fault.drop:
        return cut(request, web.Response())
    if fault.mode.startswith("echo"):
        assert echo is not None, "an echo mode needs the echo answers"
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


UNFRAMED = ("unframed_fin", "unframed_reset")


def unframed(request: web.Request, content_type: str, first: bytes, mode: str
             ) -> web.StreamResponse:
    """Write a 200 without Content-Length or chunked framing, then ``first``, then end the
    connection: a FIN, or a reset for "unframed_reset" (see ``Fault``)."""
    transport = request.transport
    assert transport is not None
    transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type.encode()
                    + b"\r\nConnection: close\r\n\r\n" + first)
    if mode == "unframed_reset":
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()
    return web.Response()  # never sent: the connection is gone


async def answer_json(request: web.Request, payload: Any, fault: Fault | None
                      ) -> web.StreamResponse:
    """A normal JSON answer, shaped by ``fault`` when it says so (reset, truncated_json, drip,
    the unframed modes)."""
    if fault is not None and fault.mode in UNFRAMED:
        data = json.dumps(payload).encode()
        return unframed(request, "application/json", data[:len(data) // 2], fault.mode)
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


def take(faults: list[Fault], body: Any, path: str) -> Fault | None:
    """The first of ``faults`` that applies to a request of ``path`` with ``body`` (counted
    off when it is limited to some times), or ``None``."""
    for fault in faults:
        if fault.times != 0 and fault.path == path and (fault.match is None
                                                        or fault.match(body)):
            if fault.times > 0:
                fault.times -= 1
            return fault
    return None
