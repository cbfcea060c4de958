"""The store's up/down state (``proxy.store.health``): a failure marks it down once and starts
probes; the first probe that answers marks it up; listeners hear both; one WARNING and one
INFO line per outage."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from proxy.store.health import StoreHealth


class Database:
    """A ping that fails while ``down`` is set."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.pings = 0

    def ping(self) -> None:
        self.pings += 1
        if self.down.is_set():
            raise ConnectionError("no answer")


async def wait_until(condition: object, limit: int = 400) -> None:
    for _ in range(limit):  # probes run every 0.25 s: poll, no timing assertion
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_down_until_a_probe_answers_with_listeners_told(caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    db = Database()
    health = StoreHealth(db.ping)
    heard: list[bool] = []
    health.listen(heard.append)
    health.listen(lambda up: 1 / 0)  # a broken listener does not stop the others
    db.down.set()
    with caplog.at_level(logging.INFO, logger="context_proxy.store"):
        health.failed("deadline")
        health.failed("deadline again")  # the same outage: marked once
        assert not health.up and health.outages == 1 and heard == [False]
        await asyncio.sleep(0.6)
        assert not health.up and db.pings >= 2  # probing, still failing
        db.down.clear()
        await wait_until(lambda: health.up)
    assert heard == [False, True] and health.down_since is None
    lines = [(r.levelname, r.getMessage()) for r in caplog.records
             if r.name == "context_proxy.store"]
    assert [level for level, _ in lines if level in ("WARNING", "INFO")] == ["WARNING", "INFO"]
    assert "unreachable (deadline)" in lines[0][1]
    await health.close(wait=True)


async def test_an_outage_soon_after_the_last_is_not_told_again(caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    db = Database()
    health = StoreHealth(db.ping)
    with caplog.at_level(logging.INFO, logger="context_proxy.store"):
        for _ in range(2):
            db.down.set()
            health.failed("refused")
            db.down.clear()
            await wait_until(lambda: health.up)
    told = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(told) == 2 and health.outages == 2  # the second outage logs at DEBUG only
    await health.close()
