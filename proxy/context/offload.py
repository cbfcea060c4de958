"""Running blocking work off the event loop without starving it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

# While work runs off the loop, the interpreter switches threads at least this often, so the
# loop thread never waits the default 5 ms for the GIL behind a worker's pure-Python stretch.
OFFLOAD_SWITCH_INTERVAL = 0.0005

T = TypeVar("T")
_offloaded = 0
_saved_interval = 0.0


async def run_off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking ``fn(*args)`` in a worker thread without starving the event loop.

    Token counting releases the GIL inside tiktoken and hashlib, but hashing many small messages
    and the stages' own loops are pure Python; with the default 5 ms switch interval every
    ``/healthz`` would wait up to 5 ms behind them. The interval is lowered while any offloaded
    work is running and restored when the last one ends (both on the loop's thread).
    """
    global _offloaded, _saved_interval
    if _offloaded == 0:
        _saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(_saved_interval, OFFLOAD_SWITCH_INTERVAL))
    _offloaded += 1
    try:
        return await asyncio.to_thread(fn, *args)
    finally:
        _offloaded -= 1
        if _offloaded == 0:
            sys.setswitchinterval(_saved_interval)


class Offload(Protocol):
    """How a request's blocking work runs: decided once per request, at the service edge."""

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T: ...


async def run_inline(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the loop: for work too small to be worth a thread hop."""
    return fn(*args)


def offload_for(big: bool) -> Offload:
    """``run_off_loop`` for big inputs, ``run_inline`` for the rest."""
    return run_off_loop if big else run_inline
