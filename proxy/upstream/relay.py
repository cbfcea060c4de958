"""Relaying upstream answers to the client: whole bodies, and streams chunk by chunk.

A whole body is read before anything is answered, so a broken read still gets a clean answer:
502 ``upstream_broken`` (504 ``upstream_timeout`` when the upstream stalls), never a 500. An
error answer whose body is not JSON becomes an OpenAI-shaped error (the status mapping is in
``proxy.upstream.answers``); a JSON error body is relayed, scrubbed of the upstream key.

A stream is never buffered: each chunk is written to the client as it arrives (with an
``EventCheck``: each complete line). When the upstream breaks mid-stream (after the client
already has a 200), or a checked stream sends a data line that is not JSON, an SSE stream gets a
final ``data: {"error": ...}`` event so SDKs raise instead of silently truncating; any other
stream is cut (the client's connection closed) so the client sees its body is incomplete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable, Mapping
from typing import Literal

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from proxy.errors import ApiError
from proxy.upstream.answers import EventCheck, error_status, unusable_error
from proxy.upstream.client import Upstream, response_headers
from proxy.upstream.scrub import DECODED, Scrubber, decode_whole, scrub_whole

log = logging.getLogger("context_proxy.relay")

SMALL_BODY = 1 << 20
BROKEN = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)
# Headers that describe the upstream's body, dropped when the proxy answers a body of its own.
_BODY_HEADERS = ("Content-Type", "Content-Encoding", "Content-Disposition", "ETag")

Check = Callable[[bytes], ApiError | None]


def is_event_stream(resp: aiohttp.ClientResponse) -> bool:
    return resp.headers.get("Content-Type", "").startswith("text/event-stream")


def is_encoded(resp: aiohttp.ClientResponse) -> bool:
    """Whether the body is content-encoded (gzip, ...), so the proxy cannot read it as it is."""
    return resp.headers.get("Content-Encoding", "").strip().lower() not in ("", "identity")


def decodable(resp: aiohttp.ClientResponse) -> bool:
    """Whether the body's Content-Encoding is one the proxy decodes to read it (``DECODED``)."""
    return resp.headers.get("Content-Encoding", "").strip().lower() in DECODED


async def read_body(resp: aiohttp.ClientResponse, cap: int | None = None) -> bytes:
    """The whole upstream body. Raises ``ApiError``: 502 ``upstream_broken`` when the connection
    breaks or the body ends short of its ``Content-Length``, 504 ``upstream_timeout`` when the
    upstream stalls past the read timeout, 502 ``upstream_answer_too_large`` over ``cap``
    bytes (the status of an error answer is kept per ``error_status``)."""
    try:
        return await resp.read() if cap is None else await _read_capped(resp, cap)
    except TimeoutError:  # before BROKEN: aiohttp's read timeout is both
        resp.close()
        raise ApiError(504, "The upstream model stopped sending its answer.",
                       code="upstream_timeout") from None
    except BROKEN as e:
        log.warning("upstream body broke: %s", type(e).__name__)
        resp.close()
        raise ApiError(502, "The upstream connection broke while it sent its answer.",
                       code="upstream_broken") from None


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    body = bytearray()
    async for chunk in resp.content.iter_any():
        body += chunk
        if len(body) > cap:
            resp.close()
            status = error_status(resp.status) if resp.status >= 400 else 502
            raise ApiError(status, f"The upstream answered {resp.status} with a body over "
                           f"{cap} bytes.", code="upstream_answer_too_large")
    return bytes(body)


# On an answer the proxy made (not the upstream's own body).
PROXY_MADE: web.ResponseKey[bool] = web.ResponseKey("proxy_made", bool)


def error_response(error: ApiError, headers: Mapping[str, str] | None = None) -> web.Response:
    """``error`` as an OpenAI-shaped JSON answer carrying ``headers`` (the upstream's, the
    ``X-Context-*`` ones), minus those that described the upstream's own body; marked
    ``PROXY_MADE``, so a route of another API can put it in that API's shape."""
    out: CIMultiDict[str] = CIMultiDict(headers or {})
    for name in _BODY_HEADERS:
        out.popall(name, None)
    out["Content-Type"] = "application/json"
    answer = web.Response(status=error.status, body=orjson.dumps(error.body()), headers=out)
    answer[PROXY_MADE] = True
    return answer


def answer_whole(upstream: Upstream, resp: aiohttp.ClientResponse, body: bytes,
                 extra_headers: Mapping[str, str] | None = None,
                 check: Check | None = None) -> web.Response:
    """The upstream answer as one response, with ``extra_headers``. An error answer (>= 400) is
    relayed scrubbed of the upstream key when its body is JSON, otherwise replaced by the
    OpenAI-shaped error ``unusable_error`` gives; ``check`` may refuse a 200 body (its error is
    answered instead). The upstream's other headers (``Retry-After``...) are kept either way."""
    headers = response_headers(resp.headers, secret=upstream.api_key)
    if extra_headers:
        headers.update(extra_headers)
    encoded = is_encoded(resp)
    if check is not None and resp.status == 200 and decodable(resp):
        # A managed answer is read (checked, its usage counted): decoded, and sent so.
        plain = decode_whole(body, resp.headers.get("Content-Encoding", ""))
        if plain is None:
            return error_response(ApiError(
                502, "The upstream answer does not decode as its Content-Encoding says.",
                code="upstream_invalid_answer"), headers)
        body, encoded = plain, False
        headers.popall("Content-Encoding", None)
    problem = _problem(resp, body, check, encoded)
    if problem is not None:
        return error_response(problem, headers)
    if upstream.secret:
        body, decoded = scrub_whole(body, upstream.secret,
                                    resp.headers.get("Content-Encoding", "") if encoded else "")
        if decoded:  # looked into a compressed body to scrub it: it goes out decoded
            headers.popall("Content-Encoding", None)
    return web.Response(status=resp.status, body=body, headers=headers)


def _problem(resp: aiohttp.ClientResponse, body: bytes, check: Check | None, encoded: bool
             ) -> ApiError | None:
    if resp.method == "HEAD":  # no body to judge
        return None
    if resp.status >= 400:
        return unusable_error(resp.status, body, resp.headers.get("Content-Type", ""), encoded)
    if resp.status == 200 and check is not None and not encoded:
        return check(body)
    return None


async def relay_whole(upstream: Upstream, resp: aiohttp.ClientResponse,
                      extra_headers: Mapping[str, str] | None = None,
                      check: Check | None = None, cap: int | None = None) -> web.Response:
    """Read the upstream body (``read_body``) and answer it (``answer_whole``); a broken read
    is answered as its ``ApiError``, with ``extra_headers``."""
    try:
        body = await read_body(resp, cap)
    except ApiError as e:
        return error_response(upstream.shutting_down() if upstream.stopping else e,
                              extra_headers)
    return answer_whole(upstream, resp, body, extra_headers, check)


async def relay_stream(request: web.Request, resp: aiohttp.ClientResponse,
                       extra_headers: Mapping[str, str] | None = None,
                       preamble: bytes = b"",
                       check: EventCheck | None = None,
                       tracked: set[aiohttp.ClientResponse] | None = None,
                       secret: bytes | None = None,
                       error_event: bytes | None = None) -> web.StreamResponse:
    """Relay the upstream body as it arrives, ``preamble`` first. With ``check`` (an SSE answer)
    only complete lines are written and the relay stops at the first bad data line; that, or a
    break mid-stream, ends the stream as the module doc says. ``secret`` (the upstream key)
    never reaches the client, not even split across chunks. ``error_event`` is the SSE event
    that ends a broken stream (OpenAI's ``data: {"error": ...}`` when not given)."""
    headers = response_headers(resp.headers, secret=secret.decode() if secret else None)
    if extra_headers:
        headers.update(extra_headers)
    coding = resp.headers.get("Content-Encoding", "")
    # Decoded before its events are checked (and scrubbed): a check of compressed bytes would
    # find no event, final or bad, in them.
    decoding = check is not None and coding.strip().lower() in DECODED
    scrubber = Scrubber(secret or b"", coding) if secret or decoding else None
    if scrubber is not None and scrubber.decodes:  # relayed decoded, to be scrubbed
        headers.popall("Content-Encoding", None)
        headers.popall("Content-Length", None)
    out = web.StreamResponse(status=resp.status, headers=headers)
    await out.prepare(request)
    if preamble:
        await out.write(preamble)
    if tracked is not None:  # ``Upstream.end_streams`` can end it when the server stops
        tracked.add(resp)
    try:
        outcome = await _pump(request, out, resp, check, scrubber)
    finally:
        if tracked is not None:
            tracked.discard(resp)
    if outcome == "end" and check is not None and not check.finished:
        log.warning("upstream stream ended without its final event on %s", request.path)
        outcome = "broken"
    if outcome == "end":
        # Quietly: an SDK may hang up as soon as it read [DONE], before the end of the body.
        await _write_quietly(out, scrubber.flush() if scrubber is not None else b"")
    elif outcome == "broken":
        await _end_broken(request, out, resp, check, error_event or _STREAM_ERROR)
    return out


async def _pump(request: web.Request, out: web.StreamResponse, resp: aiohttp.ClientResponse,
                check: EventCheck | None, scrubber: Scrubber | None
                ) -> Literal["end", "broken", "gone"]:
    """Write the upstream's chunks (``check``ed) as they come, until its end, a break (of the
    upstream, or a bad data line) or the client leaving."""
    while chunk := await _next_chunk(request, resp):
        data = chunk
        if scrubber is not None:  # decoded and scrubbed first: the check reads the events
            try:
                data = scrubber.feed(data)
            except zlib.error:
                log.warning("upstream stream does not decode as it says on %s", request.path)
                return "broken"
        if check is not None:
            data = check.feed(data)
        if data and not await _write(out, resp, data):
            return "gone"
        if check is not None and check.bad:
            log.warning("upstream stream sent a data line that is not JSON on %s", request.path)
            return "broken"
    if chunk is None:
        return "broken"
    rest = scrubber.flush() if scrubber is not None else b""  # what it held back
    if check is not None:
        rest = (check.feed(rest) if rest else b"") + (b"" if check.bad else check.flush())
    if rest and not await _write(out, resp, rest):
        return "gone"
    return "broken" if check is not None and check.bad else "end"


async def _next_chunk(request: web.Request, resp: aiohttp.ClientResponse) -> bytes | None:
    """The next chunk of the upstream body (``b""`` at its end), None when the upstream broke."""
    try:
        return await resp.content.readany()
    except (*BROKEN, TimeoutError) as e:
        log.warning("upstream stream broke on %s: %s", request.path, type(e).__name__)
        return None


async def _write(out: web.StreamResponse, resp: aiohttp.ClientResponse, data: bytes) -> bool:
    """Write ``data`` to the client; False (and the upstream stopped) when the client left."""
    if not data:
        return True
    try:
        await out.write(data)
    except ConnectionResetError:
        # The client went away: stop the upstream generating for nobody.
        resp.close()
        return False
    return True


async def _end_broken(request: web.Request, out: web.StreamResponse,
                      resp: aiohttp.ClientResponse, check: EventCheck | None, event: bytes
                      ) -> web.StreamResponse:
    """Stop the upstream; end an SSE stream with the error event (after a blank line when an
    event was left open), cut any other."""
    resp.close()
    if is_event_stream(resp):
        lead = b"\n" if check is not None and check.open_event else b""
        await _write_quietly(out, lead + event)
    elif request.transport is not None:
        request.transport.close()
    return out


_STREAM_ERROR = b"data: " + json.dumps({"error": {
    "message": "The upstream stream ended unexpectedly.", "type": "upstream_error",
    "param": None, "code": "upstream_broken"}}).encode() + b"\n\n"


async def _write_quietly(out: web.StreamResponse, data: bytes) -> None:
    """Write ``data`` and end the body, unless the client is already gone."""
    try:
        if data:
            await out.write(data)
        await out.write_eof()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
        pass


async def relay(request: web.Request, upstream: Upstream, resp: aiohttp.ClientResponse
                ) -> web.StreamResponse:
    """Relay any upstream answer (the ``/v1/*`` routes). Error answers and small bodies are
    read whole (``relay_whole``, at most ``SMALL_BODY`` bytes): a broken read is a clean 502, a
    non-JSON error body an OpenAI-shaped error; any other body is streamed, unchecked."""
    length = resp.headers.get("Content-Length")
    small = length is not None and length.isdigit() and int(length) <= SMALL_BODY
    if request.method == "HEAD" or resp.status >= 400 or (small and not is_event_stream(resp)):
        return await relay_whole(upstream, resp, cap=SMALL_BODY)
    return await relay_stream(request, resp, tracked=upstream.streams, secret=upstream.secret)
