"""The proxy's own time on a request (``proxy.context.accounting.overhead``): from arrival to the
first send, without the time waited on summary calls; the request's stopwatch reached through the
context it runs in."""

from __future__ import annotations

import asyncio
import time

from proxy.context.accounting import overhead


def test_own_time_leaves_out_what_was_excluded_and_counts_to_the_first_send() -> None:
    watch = overhead.Stopwatch(arrived=100.0)
    watch.excluded = 2.0
    assert watch.own_since_arrival(105.0) == 3.0
    assert watch.own_since_arrival(99.0) == 0.0  # never negative
    assert watch.sent(106.0) == 4.0
    assert watch.sent(110.0) == 4.0  # a retry's time is the upstream's
    assert overhead.milliseconds(0.0123456) == "12.35"


async def test_each_request_has_its_own_stopwatch_and_excluded_waits() -> None:
    async def request() -> tuple[overhead.Stopwatch, float]:
        watch = overhead.begin()
        with overhead.excluded():
            await asyncio.sleep(0.02)
        assert overhead.current() is watch
        return watch, watch.excluded

    (a, a_out), (b, b_out) = await asyncio.gather(request(), request())
    assert a is not b and a_out >= 0.02 and b_out >= 0.02
    alone = overhead.current()  # a handler run without the middleware: a fresh one
    assert alone.arrived <= time.perf_counter()
