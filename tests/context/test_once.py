"""Single flight within the process (``proxy.context.once.Once``): callers of one key that
arrive while its work runs share that run; other keys run their own; a caller whose shared run
failed runs the work itself."""

from __future__ import annotations

import asyncio

import pytest

from proxy.context.once import Once


async def test_concurrent_callers_of_one_key_share_one_run() -> None:
    once = Once()
    runs: list[str] = []
    gate = asyncio.Event()

    def work(key: str) -> object:
        async def run() -> None:
            runs.append(key)
            await gate.wait()

        return run

    callers = [asyncio.create_task(once.run("a", work("a"))) for _ in range(3)]
    other = asyncio.create_task(once.run("b", work("b")))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*callers, other)
    assert sorted(runs) == ["a", "b"]
    await once.run("a", work("a"))  # a later caller: a run of its own
    assert runs.count("a") == 2


async def test_a_caller_whose_shared_run_failed_runs_the_work_itself() -> None:
    once = Once()
    attempts: list[int] = []
    gate = asyncio.Event()

    async def flaky() -> None:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            await gate.wait()
            raise RuntimeError("the store went away")

    first = asyncio.create_task(once.run("a", flaky))
    await asyncio.sleep(0)
    second = asyncio.create_task(once.run("a", flaky))
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(RuntimeError):
        await first
    await second  # ran the work again, and it completed
    assert attempts == [0, 1]
