"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the proxy itself reports goes through ``ApiError`` so that clients (the ``openai``
SDKs in particular) can parse it, and so no traceback ever reaches a client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "server_error",
    504: "upstream_error",
}


RETRYABLE = frozenset({408, 429})  # the 4xx a client may rightly ask again for


class ApiError(Exception):
    """An error answered to the client with ``status`` and an OpenAI-shaped body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type_ or _TYPES.get(status, "invalid_request_error")

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self, headers: Mapping[str, str] | None = None) -> web.Response:
        """The error as an answer. A refusal that asking again cannot change (a 4xx other than
        408 and 429) says ``x-should-retry: false``, which the OpenAI SDKs honour: without it
        they retry a 409 twice, for the same answer; a 503 (shutting down, the store away)
        says ``true``."""
        out = dict(headers or {})
        if 400 <= self.status < 500 and self.status not in RETRYABLE:
            out.setdefault("x-should-retry", "false")
        elif self.status == 503:  # the proxy cannot serve it now; it (or another) soon will
            out.setdefault("x-should-retry", "true")
        return web.Response(
            status=self.status,
            body=json.dumps(self.body()).encode(),
            content_type="application/json",
            headers=out,
        )


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                    409: "invalid_request_error", 413: "request_too_large",
                    429: "rate_limit_error", 529: "overloaded_error"}


def anthropic_body(status: int, message: str) -> dict[str, object]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"),
                                       "message": message}}


def as_anthropic(response: web.Response) -> web.Response:
    """An answer made by ``ApiError.response`` in Anthropic's shape instead (same status and
    headers), for the ``/v1/messages`` route."""
    try:
        message = json.loads(response.body)["error"]["message"]  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError):
        return response
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in ("content-type", "content-length")}
    return web.Response(status=response.status, content_type="application/json",
                        body=json.dumps(anthropic_body(response.status, message)).encode(),
                        headers=headers)


class ConfigError(ValueError):
    """A configuration file or variable is invalid; the message names the file and the key."""


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
