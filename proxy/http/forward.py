"""The managed routes' way upstream and back, for every API: send the managed body, retry once
on a context-length refusal that compaction can help with, relay the answer with the
``X-Context-*`` headers and feed its usage back to the context service.

What differs by API travels in a ``Leg`` (where it goes, how the proxy's own errors are shaped,
how the answer is checked and its usage read); where a good answer goes, in a ``Sink``: the HTTP
response (``HttpSink``) or a Responses WebSocket (``proxy.http.websocket.responses_ws``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import aiohttp
from aiohttp import web

from proxy.context.accounting import overhead
from proxy.context.accounting.money import Money
from proxy.context.job import Job
from proxy.context.report import ContextReport
from proxy.errors import ApiError
from proxy.state import ProxyState
from proxy.upstream.answers import EventCheck
from proxy.upstream.client import Upstream
from proxy.upstream.relay import (
    PROXY_MADE,
    Check,
    answer_whole,
    decodable,
    error_response,
    is_encoded,
    is_event_stream,
    read_body,
    relay_stream,
)
from proxy.upstream.usage import UpstreamUsage, is_overflow, stated_window

log = logging.getLogger("context_proxy")


class Scanner(Protocol):
    """Reads a stream's usage from its lines as ``EventCheck`` passes them: those that contain
    ``marker``."""

    usage: UpstreamUsage
    marker: bytes

    def line(self, line: bytes) -> None: ...


class Sink(Protocol):
    """Where a good (200) upstream answer is delivered. An error answer is never given to the
    sink: ``forward`` returns it, unsent, for the caller to deliver."""

    async def stream(self, resp: aiohttp.ClientResponse, headers: Mapping[str, str],
                     preamble: bytes, check: EventCheck | None, upstream: Upstream,
                     error_event: bytes | None) -> web.StreamResponse:
        """Relay the upstream's event stream as it arrives (``relay_stream``'s contract)."""

    async def whole(self, answer: web.Response) -> None:
        """Deliver a whole 200 answer now."""


@dataclass(frozen=True)
class HttpSink:
    """The HTTP response of ``request``: a stream as server-sent events, a whole answer as is."""

    request: web.Request

    async def stream(self, resp: aiohttp.ClientResponse, headers: Mapping[str, str],
                     preamble: bytes, check: EventCheck | None, upstream: Upstream,
                     error_event: bytes | None) -> web.StreamResponse:
        return await relay_stream(self.request, resp, headers, preamble=preamble, check=check,
                                  tracked=upstream.streams, secret=upstream.secret,
                                  error_event=error_event)

    async def whole(self, answer: web.Response) -> None:
        await answer.prepare(self.request)
        await answer.write_eof()


def _same(response: web.Response) -> web.Response:
    return response


@dataclass(frozen=True)
class Leg:
    """One API's upstream leg. ``shape`` puts the proxy's own error answers in the API's shape;
    ``check`` refuses a whole 200 that is not that API's answer; ``usage`` reads the
    ``UpstreamUsage`` off a whole answer, ``scanner`` off a stream; ``error_event`` ends a broken
    stream (OpenAI's when ``None``), ``stream_end`` marks the events that end a whole one.
    ``route`` labels the leg's metrics (``context_proxy_upstream_duration_seconds``)."""

    upstream: Upstream
    path: str
    headers: Mapping[str, str]
    route: str
    check: Check
    usage: Callable[[bytes], UpstreamUsage]
    scanner: Callable[[], Scanner]
    query: str = ""
    shape: Callable[[web.Response], web.Response] = _same
    error_event: bytes | None = None
    stream_end: tuple[bytes, ...] = ()


async def forward(request: web.Request, state: ProxyState, job: Job, report: ContextReport,
                  leg: Leg, sink: Sink | None = None) -> web.StreamResponse:
    """Send upstream, retry once on a context-length refusal that compaction could help with,
    relay into ``sink`` (``request``'s own response by default), record the usage.
    Unreachable or too slow, the error still says what the proxy did (the ``X-Context-*``
    headers); an error answer is returned unsent. Every answer carries the proxy's own time
    (``X-Context-Overhead-Ms``: until its headers leave, without the upstream's), booked in
    ``context_proxy_overhead_seconds``."""
    body = job.request.outgoing(report)
    sent = time.perf_counter()
    try:
        resp = await _open(leg, body)
    except ApiError as e:
        state.metrics.upstream_for(leg.route)(time.perf_counter() - sent)
        return leg.shape(e.response(headers=_stamped(state, leg, report.headers())))
    try:
        if not 200 <= resp.status < 300:
            error_body = await read_timed(resp)
            if not is_overflow(resp.status, error_body):
                return _own(leg, answer_whole(leg.upstream, resp, error_body,
                                              _stamped(state, leg, report.headers())))
            retry = replace(await state.context.retry_overflow(job, stated_window(error_body)),
                            notes=report.notes)
            again = job.request.outgoing(retry)
            if again == body:  # compaction could not shrink it: the same refusal again
                return _own(leg, answer_whole(leg.upstream, resp, error_body, _stamped(
                    state, leg, replace(retry, retried=None).headers())))
            resp.release()
            report = retry
            try:
                resp = await _open(leg, again)
            except ApiError as e:
                return leg.shape(e.response(headers=_stamped(state, leg, report.headers())))
        return await _relay(sink or HttpSink(request), state, job, resp, report, leg)
    finally:
        resp.release()
        state.metrics.upstream_for(leg.route)(time.perf_counter() - sent)


def own_time(state: ProxyState, route: str) -> str:
    """The proxy's own time on the request so far, as the header says it (``overhead.stamp``:
    booked in ``context_proxy_overhead_seconds`` the first time)."""
    return overhead.stamp(state.metrics.overhead_for(route))


def _stamped(state: ProxyState, leg: Leg, headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the proxy's own time until now (``own_time``)."""
    headers[overhead.HEADER] = own_time(state, leg.route)
    return headers


async def _open(leg: Leg, body: bytes) -> aiohttp.ClientResponse:
    return await send_timed(leg.upstream, leg.path, leg.headers, body, leg.query, leg.route)


async def send_timed(upstream: Upstream, path: str, headers: Mapping[str, str], body: bytes,
                     query: str, route: str) -> aiohttp.ClientResponse:
    """POST ``body`` (``Upstream.open``); from its last byte out to the answer's headers in
    is the upstream's time, not the proxy's (``overhead.waited``)."""
    sent = overhead.SentBody(body)
    started = time.perf_counter()
    try:
        return await upstream.open("POST", path, headers, sent, query, route=route)
    finally:
        overhead.waited(started, sent)


async def read_timed(resp: aiohttp.ClientResponse) -> bytes:
    """The whole upstream body (``read_body``); waiting for it is the upstream's time."""
    started = time.perf_counter()
    try:
        return await read_body(resp)
    finally:
        overhead.waited(started)


async def _relay(sink: Sink, state: ProxyState, job: Job, resp: aiohttp.ClientResponse,
                 report: ContextReport, leg: Leg) -> web.StreamResponse:
    """Relay the answer with the ``X-Context-*`` headers and record its usage. A stream is
    checked line by line (a data line that is not JSON ends it with the error event); a whole
    200 must pass ``leg.check`` (else 502); a broken read is a 502. The money headers of a
    stream are estimated from the prompt side (sent before the upstream reports its usage);
    those of a whole answer are its reported usage, priced."""
    extra = report.headers()
    ledger = state.context.ledger
    if job.request.stream and resp.status == 200 and is_event_stream(resp):
        scanner = leg.scanner()
        # (a gzip or deflate stream is checked decoded; another coding cannot be read)
        check = None if is_encoded(resp) and not decodable(resp) else EventCheck(
            on_line=scanner.line, only=scanner.marker, terminal=leg.stream_end)
        headers = extra | ledger.estimate(job, report).headers()
        out = await sink.stream(resp, _stamped(state, leg, headers), report.sse_comment(),
                                check, leg.upstream, leg.error_event)
        await _record(state, job, report, scanner.usage)
        return out
    try:
        whole = await read_timed(resp)
    except ApiError as e:
        failed = leg.upstream.shutting_down() if leg.upstream.stopping else e
        return _own(leg, error_response(failed, _stamped(state, leg, extra)))
    answer = answer_whole(leg.upstream, resp, whole, extra, check=leg.check)
    if answer.status == 200 and isinstance(answer.body, bytes):
        # The client has its answer before the usage is booked: that is bookkeeping, not part
        # of the latency it waits for (aiohttp sends an answer sent here only once).
        usage = leg.usage(answer.body)
        priced = ledger.actual(job, report, usage) if usage.prompt > 0 else None
        answer.headers.update((priced or ledger.estimate(job, report)).headers())
        answer.headers[overhead.HEADER] = own_time(state, leg.route)
        try:
            await sink.whole(answer)
        finally:  # paid for, whether the client stayed for the answer or not
            await _record(state, job, report, usage, priced)
        return answer
    # An error the proxy made (of a 2xx it could not use, of an error body that is not JSON)
    # is its own: in the API's shape. The upstream's own JSON errors are relayed as they came.
    answer.headers[overhead.HEADER] = own_time(state, leg.route)
    return _own(leg, answer)


def _own(leg: Leg, answer: web.Response) -> web.Response:
    """``answer`` in the leg's API shape when the proxy made it (``PROXY_MADE``)."""
    return leg.shape(answer) if answer.get(PROXY_MADE) else answer


async def _record(state: ProxyState, job: Job, report: ContextReport, usage: UpstreamUsage,
                  priced: Money | None = None) -> None:
    """Book an answered request's usage. Its answer has been sent by now, so a failure here
    is logged, never answered."""
    try:
        await state.context.record_usage(job, report, usage, priced)
    except Exception:
        log.exception("could not record the upstream's usage of an answered request")


async def not_allowed(request: web.Request) -> web.StreamResponse:
    """Any other method on a managed path: the proxy's own 405, not the catch-all relay."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])
