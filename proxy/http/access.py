"""The access log (SPEC section 9): one line per answered request.

Each line names the method, the route template, the path (never its query, which may carry a
credential), the status, the duration, the conversation id and what the context stages did, and
the request id. Keys and message content never appear.

When the line's only way out is a handler that can write it directly (``AccessSink``, such as
the serving process's ``proxy.cli.logs.BufferedStderr``), it goes there without a log record;
any other set-up (more handlers, a filter) gets the record through ``logging`` as usual.
"""

from __future__ import annotations

import logging
import time as clock
from collections.abc import Mapping
from typing import Protocol

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, Request, StreamResponse

from proxy.http.middleware import REQUEST_ID, ROUTE, route_label

ACCESS_LOGGER = "context_proxy.access"
LINE = '%s "%s %s" %s %.1fms route=%s conversation=%s outcome=%s request_id=%s'


class AccessSink(Protocol):
    def access(self, name: str, message: str, fields: Mapping[str, object],
               created: float) -> bool:
        """Write the INFO line of logger ``name``; False when it cannot (nothing written)."""


def direct_sink(logger: logging.Logger) -> AccessSink | None:
    """The one handler an INFO record of ``logger`` would reach, when no filter would see it
    on the way and the handler can take a line directly."""
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if found is not None or handler.level > logging.INFO:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    return found if found is not None and hasattr(found, "access") else None


class AccessLog(AbstractAccessLogger):
    """aiohttp's ``access_log_class``: called once the answer has been written."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        headers = response.headers
        route = request.get(ROUTE) or (route_label(request) if isinstance(request, Request)
                                       else "unmatched")
        emit(logger, {
            "method": request.method, "route": route, "path": request.path[:256],
            "status": response.status, "duration_ms": round(time * 1000, 2),
            "conversation": headers.get("X-Conversation-Id", "-"),
            "outcome": headers.get("X-Context-Compaction", "-"),
            "request_id": headers.get(REQUEST_ID, "-"),
            "remote": request.remote or "-"})


def emit(logger: logging.Logger, fields: Mapping[str, object]) -> None:
    """Write one access line of ``fields`` (those ``AccessLog`` gives, by the same names): to
    the direct sink when there is one, else as a log record carrying them."""
    if not logger.isEnabledFor(logging.INFO):
        return
    args = tuple(fields[k] for k in ("remote", "method", "path", "status", "duration_ms",
                                      "route", "conversation", "outcome", "request_id"))
    sink = direct_sink(logger)
    if sink is None or not sink.access(logger.name, LINE % args, fields, clock.time()):
        logger.info(LINE, *args, extra=dict(fields))
