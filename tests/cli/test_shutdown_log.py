"""``serve``'s shutdown line (``proxy.cli.shutdown_log``), with the application started in
process: one INFO line saying how many requests were in flight, finished and cut."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiohttp import web
from inproc import settings_for, started

from proxy.cli import shutdown_log
from proxy.state import STATE


def test_nothing_is_in_flight_in_an_app_without_state() -> None:
    assert shutdown_log.in_flight(web.Application()) == 0


@pytest.mark.own_store
async def test_the_line_counts_what_was_in_flight(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1")
    with caplog.at_level(logging.INFO, logger="context_proxy"):
        async with started(settings, shutdown_log.install) as app:
            gauge = app[STATE].metrics.in_flight
            gauge.labels("chat").inc(3)  # three requests being answered
            assert shutdown_log.in_flight(app) == 3
            gauge.labels("chat").dec(2)  # two finish within the grace, one is cut
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shut down")]
    assert len(lines) == 1
    assert "drained 1 request(s) in flight (0 finished, 1 cut" in lines[0]
