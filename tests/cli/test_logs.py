"""The serving process's log lines: an access line written directly (no log record) is the line
``logging`` would have written for the same values, in both formats; it is written directly
only when nothing else (a filter, another handler) should see the record."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.cli.logs import BufferedStderr, JsonFormatter, TextFormatter
from proxy.http.access import LINE, AccessLog, direct_sink

FIELDS: dict[str, object] = {
    "method": "POST", "route": "chat", "path": "/v1/chat/completions", "status": 200,
    "duration_ms": 3.25, "conversation": "conv-ü-1", "outcome": "none", "request_id": "r-1",
    "remote": "127.0.0.1"}
ARGS = ("127.0.0.1", "POST", "/v1/chat/completions", 200, 3.25, "chat", "conv-ü-1", "none", "r-1")


@pytest.fixture
def sink() -> Iterator[tuple[BufferedStderr, io.StringIO]]:
    out = io.StringIO()
    handler = BufferedStderr(every_s=60, stream=out)
    yield handler, out
    handler.close()


@pytest.mark.parametrize("formatter", [TextFormatter, JsonFormatter])
@pytest.mark.parametrize("created", [1_764_590_000.0, 1_764_590_000.999, 1_764_590_061.0505])
def test_a_direct_line_is_the_line_logging_writes(
        sink: tuple[BufferedStderr, io.StringIO], formatter: type[logging.Formatter],
        created: float) -> None:
    handler, out = sink
    handler.setFormatter(formatter())
    record = logging.LogRecord("context_proxy.access", logging.INFO, __file__, 1, LINE, ARGS,
                               None)
    record.created, record.msecs = created, int((created - int(created)) * 1000)
    record.__dict__.update(FIELDS)
    handler.emit(record)
    assert handler.access("context_proxy.access", LINE % ARGS, FIELDS, created)
    by_logging, direct = out.getvalue().splitlines()
    assert direct == by_logging
    if formatter is JsonFormatter:
        doc = json.loads(direct)
        assert doc["conversation"] == "conv-ü-1" and doc["status"] == 200
        assert doc["time"].endswith(f".{record.msecs:03d}Z")


def test_a_handler_with_a_filter_or_a_foreign_formatter_takes_records(
        sink: tuple[BufferedStderr, io.StringIO]) -> None:
    handler, out = sink
    handler.setFormatter(logging.Formatter("%(message)s"))
    assert not handler.access("x", "line", FIELDS, 0.0)
    handler.setFormatter(TextFormatter())
    handler.addFilter(lambda record: True)
    assert not handler.access("x", "line", FIELDS, 0.0)
    assert out.getvalue() == ""


class Unwritable(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("no space left on device")


def test_a_line_that_cannot_be_written_is_left_to_logging() -> None:
    handler = BufferedStderr(every_s=60, stream=Unwritable())
    handler.setFormatter(TextFormatter())
    try:
        assert not handler.access("x", "line", FIELDS, 0.0)  # logging then reports it
    finally:
        handler.close()


def test_direct_sink_only_when_the_record_would_meet_that_handler_alone(
        sink: tuple[BufferedStderr, io.StringIO]) -> None:
    handler, _ = sink
    parent = logging.getLogger("logs_test")
    logger = logging.getLogger("logs_test.access")
    parent.propagate = False
    parent.handlers[:] = [handler]
    try:
        assert direct_sink(logger) is handler
        logger.addFilter(lambda record: True)
        assert direct_sink(logger) is None  # the filter must see the record
        logger.filters.clear()
        logger.addHandler(logging.NullHandler())
        assert direct_sink(logger) is None  # two handlers: logging's own way
        logger.handlers.clear()
        handler.setLevel(logging.WARNING)
        assert direct_sink(logger) is None
        handler.setLevel(logging.NOTSET)
        parent.handlers[:] = [logging.NullHandler()]
        assert direct_sink(logger) is None  # a handler of logging's own
    finally:
        parent.handlers.clear()
        parent.propagate = True


async def _serve(logger: logging.Logger) -> None:
    """One request to a real server whose access log is ``AccessLog`` on ``logger``."""
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi", headers={"X-Conversation-Id": "conv-9"})

    app = web.Application()
    app.router.add_get("/hello", hello, name="hello")
    runner = web.AppRunner(app, access_log_class=AccessLog, access_log=logger)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{port}/hello?key=sk-secret-in-query") as resp:
            assert resp.status == 200
    finally:
        await runner.cleanup()  # the answer is logged by the time the server has shut down


async def test_access_lines_skip_the_log_record_only_when_nothing_would_see_it(
        sink: tuple[BufferedStderr, io.StringIO]) -> None:
    handler, out = sink
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("logs_test_served.access")
    logger.propagate, logger.handlers[:] = False, [handler]
    logger.setLevel(logging.INFO)
    seen: list[logging.LogRecord] = []
    made: list[str] = []
    factory = logging.getLogRecordFactory()

    def counted(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        made.append(record.name)
        return record

    logging.setLogRecordFactory(counted)
    try:
        await _serve(logger)
        assert logger.name not in made  # written directly: no record made
        direct = out.getvalue()
        assert '"GET /hello" 200' in direct and "route=hello conversation=conv-9" in direct
        assert "sk-secret" not in direct
        def keep(record: logging.LogRecord) -> bool:
            seen.append(record)
            return False  # seen by the filter, and dropped

        logger.addFilter(keep)
        await _serve(logger)
    finally:
        logging.setLogRecordFactory(factory)
        logger.handlers.clear()
        logger.filters.clear()
    assert len(seen) == 1 and seen[0].__dict__["conversation"] == "conv-9"
    assert out.getvalue().count('"GET /hello" 200') == 1  # the second went to the filter
