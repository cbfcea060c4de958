"""The one middleware (``proxy.http.middleware``), in process: every failure leaves in the
route's API shape with its status (a 500 for the unexpected, without a traceback), every
request is counted by its route name, every answer carries a request id, and aiohttp's parser
errors become one WARNING line."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from inproc import request, routed

from proxy.errors import ApiError
from proxy.http.middleware import (
    REQUEST_ID,
    QuietParserErrors,
    error_middleware,
    route_label,
    shaped,
    stamp_request_id,
)
from proxy.state import STATE
from proxy.testing.scrape import metric

App = Callable[..., Awaitable[web.Application]]


def failing(error: BaseException) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise error

    return handler


async def test_route_labels_are_route_names_never_paths(make_app: App) -> None:
    app = await make_app()
    assert route_label(await routed(app, "POST", "/v1/chat/completions")) == "chat"
    assert route_label(await routed(app, "GET", "/v1/conversations/ticket-1/dividers")) == \
        "dividers"
    assert route_label(await routed(app, "GET", "/nowhere")) == "unmatched"


@pytest.mark.parametrize(("error", "status", "code"), [
    (ApiError(409, "busy", code="conflict"), 409, "conflict"),
    (web.HTTPNotFound(), 404, "not_found"),
    (RecursionError(), 400, "invalid_json"),
    (KeyError("boom"), 500, "internal_error")])
async def test_failures_leave_in_openais_shape_and_are_counted(
        make_app: App, error: BaseException, status: int, code: str) -> None:
    app = await make_app()
    req = await routed(app, "POST", "/v1/chat/completions")
    answer = await error_middleware(req, failing(error))
    assert answer.status == status
    body = json.loads(answer.body)  # type: ignore[attr-defined]
    assert body["error"]["code"] == code and "boom" not in answer.body.decode()  # type: ignore
    text = app[STATE].metrics.render().decode()
    assert metric(text, "context_proxy_requests_total", route="chat",
                  status_class=f"{status // 100}xx") == 1
    # A refusal of the proxy's own on a managed route says the proxy's time.
    assert ("X-Context-Overhead-Ms" in answer.headers) == isinstance(error, ApiError)


async def test_the_messages_route_answers_in_anthropics_shape(make_app: App) -> None:
    app = await make_app()
    answer = await error_middleware(await routed(app, "POST", "/v1/messages"),
                                    failing(ApiError(400, "bad")))
    assert json.loads(answer.body)["type"] == "error"  # type: ignore[attr-defined]
    plain = ApiError(400, "x").response()
    assert shaped("chat", plain) is plain and shaped("relay", plain) is plain


async def test_a_client_that_left_is_counted_as_499(make_app: App) -> None:
    app = await make_app()
    answer = await error_middleware(await routed(app, "GET", "/v1/models"),
                                    failing(ConnectionResetError()))
    assert answer.status == 499


async def test_every_answer_carries_a_request_id(make_app: App) -> None:
    app = await make_app()
    answer = web.Response()
    await stamp_request_id(request(app, "GET", "/", headers={REQUEST_ID: "mine-1"}), answer)
    assert answer.headers[REQUEST_ID] == "mine-1"
    for given in ("", "x" * 129, "caf\u00e9"):
        fresh = web.Response()
        await stamp_request_id(request(app, "GET", "/", headers={REQUEST_ID: given}), fresh)
        assert fresh.headers[REQUEST_ID] != given and len(fresh.headers[REQUEST_ID]) == 16


def test_a_parser_error_becomes_one_warning_without_its_line() -> None:
    try:
        raise BadHttpMessage("Invalid header: Authorization: Bearer cp-secret\x01")
    except BadHttpMessage as e:
        record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                                   "Error handling request", (), (type(e), e, e.__traceback__))
    assert QuietParserErrors().filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    assert "cp-secret" not in record.getMessage()
    assert record.getMessage() == "refused a malformed HTTP request: BadHttpMessage (400)"
