"""The proxy's own time on one request (``X-Context-Overhead-Ms``, SPEC section 6): from its
arrival to the upstream request's send, plus what the proxy does with the answer, without the
time spent waiting for the upstream's summary calls.

A ``Stopwatch`` is started by the middleware when the request arrives and kept in a context
variable, so whatever runs for the request (the handler, the context service) reaches it
without being handed it; code that waits for a summary wraps that wait in ``excluded()``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

HEADER = "X-Context-Overhead-Ms"


class Stopwatch:
    """One request's clock: ``arrived`` (``perf_counter``), the seconds ``excluded`` since
    (summary calls), and the seconds ``before_send`` once the upstream request is sent."""

    __slots__ = ("arrived", "before_send", "excluded")

    def __init__(self, arrived: float) -> None:
        self.arrived = arrived
        self.excluded = 0.0
        self.before_send: float | None = None

    def own_since_arrival(self, now: float) -> float:
        """Seconds of the proxy's own time from arrival to ``now``."""
        return max(0.0, now - self.arrived - self.excluded)

    def sent(self, now: float) -> float:
        """Mark the upstream request's send (the first one: a retry is counted from there on
        as the upstream's time); the proxy's own seconds until then."""
        if self.before_send is None:
            self.before_send = self.own_since_arrival(now)
        return self.before_send


_current: ContextVar[Stopwatch | None] = ContextVar("context_proxy_stopwatch", default=None)


def begin(arrived: float | None = None) -> Stopwatch:
    """Start this request's stopwatch (the middleware, on arrival)."""
    watch = Stopwatch(time.perf_counter() if arrived is None else arrived)
    _current.set(watch)
    return watch


def current() -> Stopwatch:
    """This request's stopwatch; a fresh one when none was started (a handler run alone)."""
    watch = _current.get()
    return watch if watch is not None else begin()


@contextmanager
def excluded() -> Iterator[None]:
    """Time spent in the block (waiting for a summary call) is not the proxy's own."""
    started = time.perf_counter()
    try:
        yield
    finally:
        watch = _current.get()
        if watch is not None:
            watch.excluded += time.perf_counter() - started


def milliseconds(seconds: float) -> str:
    """The header's value: milliseconds with two decimals."""
    return f"{seconds * 1000:.2f}"
