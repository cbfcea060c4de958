"""The one middleware: every failure leaves as an OpenAI-shaped error, and every request is
counted in the request metrics by its route template (never its path)."""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import ClientConnectionResetError, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from proxy.apis import APIS
from proxy.context.accounting import overhead
from proxy.errors import ApiError
from proxy.state import STATE, ProxyState
from proxy.store import begin_request

log = logging.getLogger("context_proxy")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLIENT_CLOSED = 499

_MESSAGES = {404: "Unknown path.", 405: "Method not allowed for this path.",
             413: "The request body is larger than this proxy accepts."}


def route_label(request: web.Request) -> str:
    """The request's route name (or template) for metrics and logs; ``unmatched`` for a
    request no route took, including one refused before routing (a malformed request, whose
    ``match_info`` aiohttp never set)."""
    try:
        info = request.match_info
    except AssertionError:
        return "unmatched"
    if info.http_exception is not None:
        return "unmatched"
    name = info.route.name
    return name or info.route.resource.canonical if info.route.resource else "unmatched"


REQUEST_ID = "X-Request-Id"
# The route label the middleware worked out, kept on the request for the access log.
ROUTE: web.RequestKey[str] = web.RequestKey("route", str)


async def stamp_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every answer carries an ``X-Request-Id``: the client's own (up to
    128 printable ASCII characters) or a new one, so a client and an operator can name it."""
    given = request.headers.get(REQUEST_ID, "")
    ok = 0 < len(given) <= 128 and given.isascii() and given.isprintable()
    response.headers[REQUEST_ID] = given if ok else f"{_PROCESS}{next(_SERIAL):08x}"


# A new id: this process's random prefix and a serial number (unique, and cheaper than drawing
# random bytes for every answer).
_PROCESS = secrets.token_hex(4)
_SERIAL = itertools.count(1)


class QuietParserErrors(logging.Filter):
    """aiohttp logs a request its HTTP parser refuses (a control character in a header, say,
    or a body that does not decode under its ``Content-Encoding``) as an ERROR with a
    traceback that quotes the offending header line, a client's key included. Such records
    become one WARNING line naming only the kind of fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RequestPayloadError) and isinstance(exc.__cause__,
                                                                 HttpProcessingError):
            exc = exc.__cause__  # a body that did not decode, met again after its answer
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "refused a malformed HTTP request: %s (%s)", (
                type(exc).__name__, exc.code)
            record.exc_info, record.exc_text = None, None
        return True


def quiet_parser_errors() -> None:
    """Install ``QuietParserErrors`` on aiohttp's server logger (once per process)."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, QuietParserErrors) for f in server.filters):
        server.addFilter(QuietParserErrors())


def shaped(route: str, response: web.Response) -> web.Response:
    """The proxy's own error in the shape of the route's API (``Api.shape``; OpenAI's on
    every other route)."""
    api = APIS.get(route)
    return api.shape(response) if api is not None else response


def _timed(route: str, resp: web.StreamResponse, state: ProxyState | None
           ) -> web.StreamResponse:
    """``resp`` with the proxy's own time when it is a managed route's answer not yet sent and
    without it (a refusal before any upstream call: all of its time is the proxy's)."""
    if route in APIS and not resp.prepared and overhead.HEADER not in resp.headers:
        resp.headers[overhead.HEADER] = overhead.stamp(
            state.metrics.overhead_for(route) if state is not None else _unbooked)
    return resp


def _unbooked(seconds: float) -> None:
    """Where the own time of an application without the proxy's state goes: nowhere."""


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer ``ApiError`` and aiohttp's HTTP errors in OpenAI's shape; nothing leaks a
    traceback. Starts the request's overhead stopwatch: every answer of a managed route carries
    ``X-Context-Overhead-Ms``."""
    start = time.perf_counter()
    overhead.begin(start)
    begin_request()
    status = 500
    state, route = request.app.get(STATE), route_label(request)
    request[ROUTE] = route
    in_flight = state.metrics.in_flight_for(route) if state is not None else None
    if in_flight is not None:
        in_flight.inc()
    try:
        resp = await handler(request)
        status = resp.status
        return _timed(route, resp, state)
    except ApiError as e:
        status = e.status
        return _timed(route, shaped(route, e.response()), state)
    except web.HTTPException as e:
        status = e.status
        if e.status < 400:
            raise
        message = _MESSAGES.get(e.status, e.reason)
        return shaped(route, ApiError(e.status, message,
                                       code=e.reason.lower().replace(" ", "_")).response(
            headers={k: v for k, v in e.headers.items() if k.lower() == "allow"}))
    except RecursionError:
        # Only a value nested deeper than Python's own limit (within what the JSON parser
        # accepts) recurses this far: the client's input, not a fault of the proxy's.
        status = 400
        log.warning("refused a request nested too deeply on %s %s", request.method,
                    request.path)
        return shaped(route, ApiError(400, "The request body is nested too deeply.",
                                       code="invalid_json").response())
    except (ConnectionResetError, ClientConnectionResetError):
        # The client went away (mid-body, or while a slow answer was on its way): nobody
        # to answer, and no fault of the proxy's. Counted as 499 (client closed request).
        status = CLIENT_CLOSED
        log.info("client closed the connection during %s %s", request.method, request.path)
        return web.Response(status=CLIENT_CLOSED)  # written to no one: aiohttp drops it
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return shaped(route, ApiError(500, "The proxy hit an internal error.",
                                       code="internal_error").response())
    finally:
        if in_flight is not None:
            in_flight.dec()
        if state is not None and status != 101:  # a socket's messages are counted one by one
            state.metrics.observe_request(route, status, time.perf_counter() - start)
