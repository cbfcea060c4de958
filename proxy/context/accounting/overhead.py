"""The proxy's own time on one request (``X-Context-Overhead-Ms``, SPEC section 6): everything
from its arrival to its answer, less the time spent waiting on the upstream (from the moment
the request's last byte went out to the moment its answer was in) and on summary calls.

A ``Stopwatch`` is started by the middleware when the request arrives and kept in a context
variable, so whatever runs for the request (the handler, the context service, the upstream
leg) reaches it without being handed it. Code that waits for a summary wraps that wait in
``excluded()``; the upstream leg sends its body as a ``SentBody``, which notes when its last
byte was written, and books the wait from there with ``waited``. ``stamp`` gives the header's
value when the answer's headers are about to leave, and books it once in the histogram.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload

HEADER = "X-Context-Overhead-Ms"


class Stopwatch:
    """One request's clock: ``arrived`` (``perf_counter``), the seconds ``excluded`` since (the
    upstream's and the summary calls'), and the own seconds ``stamped`` on its answer (None
    until then)."""

    __slots__ = ("arrived", "excluded", "stamped")

    def __init__(self, arrived: float) -> None:
        self.arrived = arrived
        self.excluded = 0.0
        self.stamped: float | None = None

    def own(self, now: float) -> float:
        """Seconds of the proxy's own time from arrival to ``now``."""
        return max(0.0, now - self.arrived - self.excluded)


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


class SentBody(BytesPayload):
    """A request body for aiohttp's client that notes when its last byte was handed to the
    connection (``sent_at``, ``perf_counter``; None until then): what follows, until the
    answer is in, is the upstream's time. Sent as the same bytes as a plain ``bytes`` body."""

    sent_at: float | None = None

    async def write_with_length(self, writer: AbstractStreamWriter,
                                content_length: int | None) -> None:
        await super().write_with_length(writer, content_length)
        self.sent_at = time.perf_counter()


def waited(started: float, body: SentBody | None = None) -> None:
    """The upstream answered (or failed) a call made at ``started``: the time since ``body``
    went out (since ``started`` when it never did) was the upstream's, not the proxy's."""
    watch = _current.get()
    if watch is not None:
        sent = body.sent_at if body is not None and body.sent_at is not None else started
        watch.excluded += time.perf_counter() - sent


def stamp(observe: Callable[[float], None]) -> str:
    """The header's value now, as the answer's headers are about to leave; the first stamp of
    a request is booked with ``observe`` (the route's histogram)."""
    watch = current()
    own = watch.own(time.perf_counter())
    if watch.stamped is None:
        watch.stamped = own
        observe(own)
    return milliseconds(own)


def milliseconds(seconds: float) -> str:
    """The header's value: milliseconds with two decimals."""
    return f"{seconds * 1000:.2f}"
