"""The proxy's own time on a request (``proxy.context.accounting.overhead``): from arrival to
the answer, less the waits on the upstream (from the body's last byte out to the answer in) and
on summary calls; the request's stopwatch reached through the context it runs in."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable

from proxy.context.accounting import overhead


def test_own_time_leaves_out_what_was_excluded_and_is_never_negative() -> None:
    watch = overhead.Stopwatch(arrived=100.0)
    watch.excluded = 2.0
    assert watch.own(105.0) == 3.0
    assert watch.own(99.0) == 0.0
    assert overhead.milliseconds(0.0123456) == "12.35"


def in_own_context(test: Callable[[], None]) -> Callable[[], None]:
    """Run a synchronous test in a context of its own: the stopwatch it starts must not stay
    set for the tests after it (a handler run without the middleware would find it)."""
    return functools.wraps(test)(lambda: contextvars.copy_context().run(test))


@in_own_context
def test_the_upstream_wait_counts_from_the_bodys_last_byte_or_the_call() -> None:
    watch = overhead.begin()
    body = overhead.SentBody(b"{}")
    body.sent_at = time.perf_counter() - 0.5  # its last byte went out half a second ago
    overhead.waited(time.perf_counter() - 2.0, body)
    assert 0.5 <= watch.excluded < 1.0  # from the last byte out, not from the call
    overhead.waited(time.perf_counter() - 0.25)  # a body never sent: from the call
    assert 0.75 <= watch.excluded < 1.5


@in_own_context
def test_the_first_stamp_is_booked_once() -> None:
    overhead.begin()
    booked: list[float] = []
    first = overhead.stamp(booked.append)
    overhead.stamp(booked.append)  # a second answer's headers (a retry's): not booked again
    assert len(booked) == 1 and float(first) >= 0.0
    assert overhead.current().stamped == booked[0]


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
