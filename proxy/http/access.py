"""The access log (SPEC section 9): one line per answered request.

Each line names the method, the route template, the path (never its query, which may carry a
credential), the status, the duration, the conversation id and what the context stages did, and
the request id. Keys and message content never appear.
"""

from __future__ import annotations

import logging

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, Request, StreamResponse

from proxy.http.middleware import REQUEST_ID, route_label

ACCESS_LOGGER = "context_proxy.access"


class AccessLog(AbstractAccessLogger):
    """aiohttp's ``access_log_class``: called once the answer has been written."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        headers = response.headers
        route = route_label(request) if isinstance(request, Request) else "unmatched"
        fields = {
            "method": request.method, "route": route, "path": request.path[:256],
            "status": response.status, "duration_ms": round(time * 1000, 2),
            "conversation": headers.get("X-Conversation-Id", "-"),
            "outcome": headers.get("X-Context-Compaction", "-"),
            "request_id": headers.get(REQUEST_ID, "-"),
            "remote": request.remote or "-"}
        self.logger.info(
            '%s "%s %s" %s %.1fms route=%s conversation=%s outcome=%s request_id=%s',
            fields["remote"], fields["method"], fields["path"], fields["status"],
            fields["duration_ms"], route, fields["conversation"], fields["outcome"],
            fields["request_id"], extra=fields)
