"""Blocking work off the event loop (``proxy.context.offload``): big work runs in a thread with
a short switch interval while any runs, restored after the last; small work runs inline."""

from __future__ import annotations

import asyncio
import sys
import threading

from proxy.context.offload import OFFLOAD_SWITCH_INTERVAL, offload_for, run_inline, run_off_loop


async def test_big_work_runs_in_a_thread_with_the_short_switch_interval() -> None:
    before = sys.getswitchinterval()
    loop_thread = threading.get_ident()
    seen: list[tuple[int, float]] = []

    def work(n: int) -> int:
        seen.append((threading.get_ident(), sys.getswitchinterval()))
        return n * 2

    assert await asyncio.gather(run_off_loop(work, 1), run_off_loop(work, 2)) == [2, 4]
    assert all(t != loop_thread and i <= OFFLOAD_SWITCH_INTERVAL for t, i in seen)
    assert sys.getswitchinterval() == before  # restored once the last one ended


async def test_small_work_runs_inline_and_the_choice_follows_the_size() -> None:
    assert await run_inline(threading.get_ident) == threading.get_ident()
    assert offload_for(True) is run_off_loop and offload_for(False) is run_inline
