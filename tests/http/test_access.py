"""The access log (``proxy.http.access``): one line per answer naming the route template, the
path without its query, status, duration, conversation, outcome and request id; written
straight to a sink that can take it, else as a log record carrying the fields."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.http.access import ACCESS_LOGGER, AccessLog, direct_sink, emit
from proxy.http.middleware import route_label


class Plain(logging.Handler):
    """A handler that only takes log records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Sink(Plain):
    """A handler that takes access lines directly too (as ``BufferedStderr`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def access(self, name: str, message: str, fields: Mapping[str, object],
               created: float) -> bool:
        self.lines.append(message)
        return True


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger(ACCESS_LOGGER + ".unit")
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log
    log.handlers.clear()
    log.filters.clear()


def test_a_line_names_the_route_and_leaves_the_query_out(logger: logging.Logger) -> None:
    sink = Sink()
    logger.handlers[:] = [sink]  # its only way out (pytest's own capture handlers replaced)
    req = make_mocked_request("POST", "/v1/chat/completions?key=cp-secret")
    answer = web.Response(status=200, headers={"X-Conversation-Id": "t-1",
                                               "X-Context-Compaction": "auto",
                                               "X-Request-Id": "r-9"})
    AccessLog(logger, "").log(req, answer, 0.0123)
    assert sink.lines == [f'- "POST /v1/chat/completions" 200 12.3ms route={route_label(req)} '
                          'conversation=t-1 outcome=auto request_id=r-9'] and not sink.records
    assert "cp-secret" not in sink.lines[0]


def test_without_a_direct_sink_the_fields_ride_on_a_record(logger: logging.Logger) -> None:
    plain = Plain()
    logger.handlers[:] = [plain]
    assert direct_sink(logger) is None
    emit(logger, {"remote": "1.2.3.4", "method": "GET", "path": "/healthz", "status": 200,
                  "duration_ms": 1.0, "route": "healthz", "conversation": "-", "outcome": "-",
                  "request_id": "r"})
    assert [r.getMessage() for r in plain.records] == [
        '1.2.3.4 "GET /healthz" 200 1.0ms route=healthz conversation=- outcome=- '
        'request_id=r']
    assert plain.records[0].route == "healthz"  # type: ignore[attr-defined]


def test_a_filter_or_a_second_handler_means_no_direct_sink(logger: logging.Logger) -> None:
    logger.handlers[:] = [Sink()]
    assert direct_sink(logger) is not None
    logger.addFilter(logging.Filter("other"))
    assert direct_sink(logger) is None
    logger.filters.clear()
    logger.addHandler(Sink())
    assert direct_sink(logger) is None
