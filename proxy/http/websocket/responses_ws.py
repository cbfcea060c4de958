"""``GET /v1/responses`` with a WebSocket upgrade: the Responses API's WebSocket mode, as Codex
CLI uses it by default (SPEC section 11).

The upgrade is authenticated like a POST (a bad key: 401 before any upgrade). Each
``response.create`` message is then managed exactly as a ``POST /v1/responses`` with that body
(``proxy.http.apis.manage``, ``forward``: masking, compaction, usage, metrics), sent upstream
over HTTP with ``stream: true``, and the upstream's SSE events are relayed one text message
each. One request at a time per socket, as the API's mode is sequential.

- ``previous_response_id`` naming the socket's last completed response is expanded here into
  the full input (that response's input and output items, then the new items), so the request
  is managed whole; any other id is relayed as it came, as over HTTP.
- ``generate: false`` (a warmup) is answered here, without an upstream call, with a new
  response id a follow-up may name.
- ``response.processed`` (an acknowledgement) needs no answer.
- What the ``X-Context-*`` headers say of a request comes as one ``context_proxy.context``
  event before its first upstream event; errors are the API's wrapped error events
  (``ws_events``), carrying those headers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import aiohttp
import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from proxy.apis import APIS
from proxy.auth import Principal
from proxy.context.accounting import overhead
from proxy.errors import ApiError, bad_request
from proxy.http.access import ACCESS_LOGGER, emit
from proxy.http.apis import leg_for, manage, relay_as_is
from proxy.http.forward import forward, not_allowed
from proxy.http.inband import trigger
from proxy.http.middleware import REQUEST_ID
from proxy.http.websocket import ws_events as ev
from proxy.state import STATE, ProxyState
from proxy.store import begin_request
from proxy.upstream.answers import EventCheck
from proxy.upstream.client import Upstream, current_key
from proxy.upstream.relay import BROKEN
from proxy.upstream.scrub import Scrubber

log = logging.getLogger("context_proxy")
access_log = logging.getLogger(ACCESS_LOGGER)

ROUTE = "responses_ws"
API = APIS["responses"]
HEARTBEAT_S = 30.0


class Outbox:
    """The socket's sending side: one message at a time (events of a response, error events of
    the reader), nothing raised when the client is gone (``send`` says False)."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self._lock = asyncio.Lock()

    async def send(self, event: Mapping[str, Any] | bytes) -> bool:
        text = event.decode("utf-8", "replace") if isinstance(event, bytes) \
            else orjson.dumps(event).decode()
        async with self._lock:
            if self.ws.closed:
                return False
            try:
                await self.ws.send_str(text)
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                return False
        return True


class SocketSink:
    """``forward``'s sink for one ``response.create``: relays the upstream's events to the
    socket and reads off them how the response ended (``answer``), calling ``on_end`` just
    before its last event goes out (the client may send its next request as soon as it has
    it). ``delivered`` is set once anything of a good answer was sent; ``status`` is what the
    request counts as."""

    def __init__(self, out: Outbox, on_end: Callable[[ev.Answer], None]) -> None:
        self.out = out
        self.on_end = on_end
        self.answer = ev.Answer()
        self.delivered = False
        self.status = 200
        self.headers: Mapping[str, str] = {}

    async def stream(self, resp: aiohttp.ClientResponse, headers: Mapping[str, str],
                     preamble: bytes, check: EventCheck | None, upstream: Upstream,
                     error_event: bytes | None) -> web.StreamResponse:
        await self._open(headers)
        upstream.streams.add(resp)  # ``Upstream.end_streams`` ends it when the server stops
        try:
            outcome = await self._pump(resp, check, upstream.secret)
        finally:
            upstream.streams.discard(resp)
        if outcome != "gone" and self.answer.ended is None:  # nothing after a response's end
            resp.close()
            self.status = 502
            self.on_end(self.answer)
            await self.out.send(ev.api_error_event(
                ev.BROKEN if outcome == "broken" else ev.UNFINISHED, ev.kept_headers(headers)))
        return self.out.ws

    async def whole(self, answer: web.Response) -> None:
        """A whole 200 (an upstream that did not stream): its response as the completed event."""
        await self._open(answer.headers)
        body = answer.body if isinstance(answer.body, bytes) else b""
        try:
            event = {"type": "response.completed", "response": orjson.loads(body)}
        except orjson.JSONDecodeError:
            self.status = 502
            self.on_end(self.answer)
            await self.out.send(ev.api_error_event(ApiError(
                502, "The upstream answer is not a responses answer.",
                code="upstream_invalid_answer"), ev.kept_headers(answer.headers)))
            return
        self.answer.see("response.completed", event)
        self.on_end(self.answer)
        await self.out.send(event)

    async def _open(self, headers: Mapping[str, str]) -> None:
        self.delivered, self.headers = True, headers
        await self.out.send(ev.context_event(headers))

    async def _pump(self, resp: aiohttp.ClientResponse, check: EventCheck | None,
                    secret: bytes | None) -> Literal["end", "broken", "gone"]:
        events, scrubber = ev.SseEvents(), Scrubber(secret) if secret else None
        while True:
            try:
                chunk = await resp.content.readany()
            except (*BROKEN, TimeoutError) as e:
                log.warning("upstream stream broke on a socket: %s", type(e).__name__)
                return "broken"
            last = not chunk
            data = chunk if check is None else check.flush() if last else check.feed(chunk)
            if scrubber is not None:
                data = scrubber.feed(data) + (scrubber.flush() if last else b"")
            for event in events.feed(data) + (events.flush() if last else []):
                if not await self._send(event):
                    resp.close()  # the client left: stop the upstream generating for nobody
                    return "gone"
            if check is not None and check.bad:
                log.warning("upstream stream sent a data line that is not JSON on a socket")
                return "broken"
            if last:
                return "end"

    async def _send(self, data: bytes) -> bool:
        if self.answer.ended is not None:
            return True  # nothing after the end of a response belongs to it
        kind, event = ev.event_type(data)
        self.answer.see(kind, event)
        if self.answer.ended is not None:
            self.on_end(self.answer)
        if kind == "error" and event is not None:
            return await self.out.send(ev.stream_error(event))
        return await self.out.send(data)


class Session:
    """One socket: reads messages until it closes, runs one ``response.create`` at a time."""

    def __init__(self, request: web.Request, state: ProxyState, principal: Principal,
                 ws: web.WebSocketResponse) -> None:
        self.request, self.state, self.principal = request, state, principal
        self.out = Outbox(ws)
        self.chain = ev.Chain()
        self.headers = ev.upstream_headers(request.headers)
        self.tasks: set[asyncio.Task[None]] = set()
        # The request that holds the socket: accepted, its last event not yet sent. Its task
        # may still run after that (booking usage) while the next request holds the socket.
        self.owner: int | None = None
        self.closing = False
        self.closer: asyncio.Future[bool] | None = None
        self._serial = 0
        self._accepted = 0

    @property
    def busy(self) -> bool:
        return self.owner is not None

    def release(self, request: int) -> None:
        """``request``'s last event is about to go out: the socket is free for the next."""
        if self.owner == request:
            self.owner = None

    async def run(self) -> None:
        try:
            async for msg in self.out.ws:
                if msg.type == WSMsgType.TEXT:
                    await self._on_text(msg.data, time.perf_counter())
                elif msg.type == WSMsgType.BINARY:
                    await self._refuse(bad_request("Binary messages are not accepted; send "
                                                   "JSON text."), time.perf_counter())
        finally:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def shutdown(self) -> None:
        """The server stops: close the socket now when idle, else after its response."""
        self.closing = True
        if not self.busy:
            await self.go_away()

    async def go_away(self) -> None:
        """Close with 1001 (once); the handler waits for it (``closer``) before it returns, so
        the close frame goes out before the connection ends."""
        if self.closer is None:
            self.closer = asyncio.ensure_future(self.out.ws.close(
                code=WSCloseCode.GOING_AWAY, message=b"server shutting down"))
        await asyncio.shield(self.closer)

    async def _on_text(self, text: str, start: float) -> None:
        try:
            body = ev.parse_message(text, self.state.settings.max_body_bytes)
        except ApiError as e:
            return await self._refuse(e, start)
        kind = body["type"]
        if kind == "response.processed":
            return None
        if kind != "response.create":
            return await self._refuse(bad_request(f"Unknown message type '{kind[:64]}'.",
                                                  param="type"), start)
        if self.busy:
            return await self._refuse(bad_request(
                "A response is already in progress on this connection; send the next "
                "response.create after it ends.", code="response_in_progress"), start)
        self._accepted += 1
        self.owner = self._accepted
        task = asyncio.create_task(self._create(body, start, self._accepted))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return None

    async def _refuse(self, error: ApiError, start: float) -> None:
        await self.out.send(ev.api_error_event(error))
        self._done(start, error.status, {})

    async def _create(self, body: dict[str, Any], start: float, request: int) -> None:
        current_key.set(self.principal.upstream_key)
        overhead.begin(start)  # each response.create is a request of its own (its own task)
        begin_request()
        status, headers = 500, {}  # type: tuple[int, Mapping[str, str]]
        try:
            status, headers = await self._respond(body, start, request)
        except ApiError as e:
            status = e.status
            self.release(request)
            await self.out.send(ev.api_error_event(e))
        except asyncio.CancelledError:
            status = 499  # the client closed the socket mid-request
            raise
        except Exception:
            log.exception("unexpected error on a Responses socket")
            self.release(request)
            await self.out.send(ev.api_error_event(ApiError(
                500, "The proxy hit an internal error.", code="internal_error")))
        finally:
            self.release(request)
            self._done(start, status, headers)
            if self.closing and status != 499 and not self.busy:
                await self.go_away()

    async def _respond(self, body: dict[str, Any], start: float, request: int
                       ) -> tuple[int, Mapping[str, str]]:
        """Answer one ``response.create``; (its status, the headers its answer would have)."""
        fields = {k: v for k, v in body.items() if k not in ("type", "generate")}
        API.check(fields)
        fields["stream"] = True
        self.chain.expand(fields)
        fields, raw = trigger.expanded(fields, orjson.dumps(fields))
        if body.get("generate") is False:
            return await self._warmup(fields, request)
        state = self.state
        if trigger.answered_here(state, API, fields):
            return await self._compaction(fields, request)
        sink = SocketSink(self.out, functools.partial(self._ended, fields, request))
        if API.keeps_history(fields):
            out = await relay_as_is(sink, state, API, self.principal, self.headers, raw)
        else:
            job, report = await manage(state, API, self.principal, self.headers, raw, fields)
            out = await forward(self.request, state, job, report,
                                leg_for(state, API, self.headers, job), sink)
        if not sink.delivered and trigger.learned(state, API, fields, out):
            return await self._compaction(fields, request)
        if not sink.delivered:  # an error answer, not sent yet
            answer = out.body if isinstance(out, web.Response) else None
            self.release(request)
            await self.out.send(ev.answer_error_event(
                out.status, answer if isinstance(answer, bytes) else b"", out.headers))
            return out.status, out.headers
        return sink.status, sink.headers

    def _ended(self, fields: dict[str, Any], request: int, done: ev.Answer) -> None:
        """A response's last event is about to go out: the socket is free, and a completed
        response is the one a follow-up may name."""
        if done.ended == "response.completed" and done.response_id:
            self.chain.completed(done.response_id, ev.as_items(fields.get("input")),
                                 done.output_items())
        self.release(request)

    async def _compaction(self, fields: dict[str, Any], request: int
                          ) -> tuple[int, Mapping[str, str]]:
        """The proxy's own answer to a ``compaction_trigger`` (``proxy.http.inband.trigger``)."""
        events = await trigger.answer_events(self.state, API, self.principal, self.headers,
                                             fields)
        done = ev.Answer()
        for event in events:
            done.see(event["type"], event)
        for event in events[:-1]:
            await self.out.send(event)
        self._ended(fields, request, done)
        await self.out.send(events[-1])
        return 200, {"X-Context-Compaction": "none"}

    async def _warmup(self, fields: dict[str, Any], request: int
                      ) -> tuple[int, Mapping[str, str]]:
        rid, events = ev.warmup_events(fields)
        await self.out.send(events[0])
        self.chain.completed(rid, ev.as_items(fields.get("input")), [])
        self.release(request)
        await self.out.send(events[1])
        return 200, {"X-Context-Compaction": "none"}

    def _done(self, start: float, status: int, headers: Mapping[str, str]) -> None:
        """Count one message as a request of route ``responses_ws`` and log its access line."""
        elapsed = time.perf_counter() - start
        self.state.metrics.observe_request(ROUTE, status, elapsed)
        self._serial += 1
        emit(access_log, {
            "method": "WS", "route": ROUTE, "path": self.request.path, "status": status,
            "duration_ms": round(elapsed * 1000, 2),
            "conversation": headers.get("X-Conversation-Id", "-"),
            "outcome": headers.get("X-Context-Compaction", "-"),
            "request_id": f"{self.out.ws.headers.get(REQUEST_ID, '-')}.{self._serial}",
            "remote": self.request.remote or "-"})


class Sessions:
    """The app's open sockets (to close them when the server stops)."""

    def __init__(self) -> None:
        self.open: set[Session] = set()


SESSIONS = web.AppKey("responses_sockets", Sessions)


async def upgrade(request: web.Request) -> web.StreamResponse:
    """``GET /v1/responses``: a WebSocket upgrade (authenticated first; a 426 when the
    deployment turned the mode off), else the 405 of any method but POST on that path."""
    state = request.app[STATE]
    ws = web.WebSocketResponse(max_msg_size=2 * state.settings.max_body_bytes,
                               heartbeat=HEARTBEAT_S, compress=True)
    if not ws.can_prepare(request).ok:
        return await not_allowed(request)
    principal = await state.auth.authenticate(request)
    if not state.settings.responses_websocket:  # Codex's sign to use HTTP at once
        raise ApiError(426, "WebSocket mode is off on this server; use POST /v1/responses.",
                       code="websocket_mode_disabled")
    await ws.prepare(request)
    session = Session(request, state, principal, ws)
    sessions = request.app[SESSIONS].open
    sessions.add(session)
    try:
        await session.run()
        if session.closer is not None:
            await asyncio.shield(session.closer)
    finally:
        sessions.discard(session)
    return ws


async def _close_sockets(app: web.Application) -> None:
    for session in list(app[SESSIONS].open):
        await session.shutdown()


def add_routes(app: web.Application) -> None:
    """The upgrade route; register it before ``proxy.http.apis``' (whose ``/v1/responses``
    answers any other method)."""
    app[SESSIONS] = Sessions()
    app.on_shutdown.append(_close_sockets)
    app.router.add_route("GET", "/v1/responses", upgrade, name=ROUTE)

