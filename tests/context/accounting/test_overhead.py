"""The proxy's own time on a request (``proxy.context.accounting.overhead``): from arrival to the
answer, without the time waited on the upstream (from its body's last byte on) and on summary
calls, stamped once on the answer; the request's stopwatch reached through the context it runs
in."""

from __future__ import annotations

import asyncio
import time

from proxy.context.accounting import overhead


def test_own_time_leaves_out_what_was_excluded() -> None:
    watch = overhead.Stopwatch(arrived=100.0)
    watch.excluded = 2.0
    assert watch.own(105.0) == 3.0
    assert watch.own(99.0) == 0.0  # never negative
    assert overhead.milliseconds(0.0123456) == "12.35"


async def test_the_upstreams_wait_counts_from_the_bodys_last_byte() -> None:
    watch = overhead.begin()
    body = overhead.SentBody(b"{}")
    started = time.perf_counter()
    await asyncio.sleep(0.02)
    body.sent_at = time.perf_counter()  # the last byte went out only now
    await asyncio.sleep(0.02)
    overhead.waited(started, body)
    assert 0.02 <= watch.excluded < time.perf_counter() - started
    before = watch.excluded
    overhead.waited(time.perf_counter() - 0.01)  # never sent: counted from the call
    assert watch.excluded - before >= 0.01


async def test_an_answer_is_stamped_and_booked_once() -> None:
    overhead.begin()  # in this test's own task: its context, not the next test's
    booked: list[float] = []
    first = overhead.stamp(booked.append)
    second = overhead.stamp(booked.append)
    assert len(booked) == 1 and float(first) >= 0 and float(second) >= float(first)


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
