"""The load generator of ``overhead.py``: requests, batches, rounds, percentiles, CPU per request.

Every scenario measures its targets in alternating rounds (the order rotated each round) so
that drift on the machine hits all of them alike. The load generator is one aiohttp
``ClientSession`` in the bench process; the garbage collector is off during each batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
from _procs import Target, cpu_ns, tail
from _workload import Growing


class RequestFailed(Exception):
    pass


async def one(session: aiohttp.ClientSession, t: Target, body: bytes, stream: bool
              ) -> tuple[float, float]:
    """One request; returns (seconds to the first body chunk, seconds to the last byte)."""
    t0 = time.perf_counter()
    async with session.post(t.url, data=body, headers=t.headers) as resp:
        if stream:
            first = 0.0
            tail_bytes = b""
            async for chunk in resp.content.iter_any():
                if not first:
                    first = time.perf_counter()
                tail_bytes = (tail_bytes + chunk)[-64:]
            end = time.perf_counter()
            ok = resp.status == 200 and b"[DONE]" in tail_bytes
        else:
            tail_bytes = await resp.read()
            end = first = time.perf_counter()
            ok = resp.status == 200 and tail_bytes.startswith(b"{")
    if not ok:
        raise RequestFailed(f"HTTP {resp.status}: {tail_bytes[:160].decode(errors='replace')}")
    return first - t0, end - t0


async def probe(session: aiohttp.ClientSession, t: Target, body: bytes) -> dict[str, str]:
    """One non-streamed request; its response headers (raises RequestFailed unless 200)."""
    async with session.post(t.url, data=body, headers=t.headers) as resp:
        text = await resp.read()
        if resp.status != 200:
            raise RequestFailed(f"HTTP {resp.status}: {text[:160].decode(errors='replace')}")
        return {k.lower(): v for k, v in resp.headers.items()}


async def batch(session: aiohttp.ClientSession, t: Target, bodies: Sequence[bytes],
                stream: bool, conc: int, n: int, max_s: float
                ) -> tuple[list[float], list[float]]:
    """``n`` requests (fewer if ``max_s`` runs out) by ``conc`` workers; request ``i`` sends
    ``bodies[i % len(bodies)]``. Returns the successful requests' (first-chunk, last-byte)
    times; failures are counted on ``t``."""
    firsts: list[float] = []
    lasts: list[float] = []
    sent = 0
    deadline = time.perf_counter() + max_s

    async def worker() -> None:
        nonlocal sent
        while sent < n and time.perf_counter() < deadline:
            body = bodies[sent % len(bodies)]
            sent += 1
            t.requests += 1
            try:
                f, e = await asyncio.wait_for(one(session, t, body, stream), 30)
            except (RequestFailed, aiohttp.ClientError, TimeoutError) as exc:
                t.errors += 1
                t.first_error = t.first_error or f"{type(exc).__name__}: {exc}"
                continue
            firsts.append(f)
            lasts.append(e)

    gc.disable()
    try:
        await asyncio.gather(*(worker() for _ in range(conc)))
    finally:
        gc.enable()
        gc.collect()
    t.check_errors()
    return firsts, lasts


def pct(sorted_xs: Sequence[float], q: float) -> float:
    """Percentile ``q`` (0-100) by linear interpolation between closest ranks."""
    if not sorted_xs:
        return float("nan")
    pos = (len(sorted_xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass
class Plan:
    rounds: int
    per_round: dict[tuple[str, int], int]  # (target kind "fast"/"litellm", conc) -> requests
    max_batch_s: float
    warmup: int
    large_per_round: int  # requests per target and round of the large scenario
    large_warmup: int


def make_plan(quick: bool) -> Plan:
    if quick:
        return Plan(4, {("fast", 1): 60, ("litellm", 1): 10, ("fast", 16): 160,
                        ("litellm", 16): 32}, 6.0, 60, 10, 3)
    return Plan(10, {("fast", 1): 120, ("litellm", 1): 25, ("fast", 16): 400,
                     ("litellm", 16): 80}, 8.0, 200, 25, 5)


MODES = [("non-streamed", False), ("streamed", True)]
LARGE = ("large", 1)  # the cell of the large scenario


@dataclass
class Cell:
    """The samples of one table: latencies (seconds) and CPU time (ns) per target key."""

    samples: dict[str, list[float]] = field(default_factory=dict)  # target key -> seconds
    # target key -> [relay CPU ns, fake CPU ns, requests]
    cpu: dict[str, list[int]] = field(default_factory=dict)

    def add_cpu(self, key: str, relay: int, fake: int, n: int) -> None:
        acc = self.cpu.setdefault(key, [0, 0, 0])
        acc[0] += relay
        acc[1] += fake
        acc[2] += n

    def cpu_us(self, key: str) -> tuple[float | None, float | None]:
        """(relay CPU, fake CPU) in microseconds per request; None without requests."""
        relay, fake, n = self.cpu.get(key, [0, 0, 0])
        if not n:
            return None, None
        return relay / 1e3 / n, fake / 1e3 / n


def _reset(t: Target) -> None:
    t.requests = t.errors = 0  # count failures of the measured requests only
    t.first_error = ""


async def warm(session: aiohttp.ClientSession, targets: list[Target], bodies: dict[bool, bytes],
               plan: Plan) -> None:
    for t in targets:
        n = plan.warmup if t.key != "litellm" else max(10, plan.warmup // 4)
        try:
            for stream in (False, True):
                await batch(session, t, [bodies[stream]], stream, 1, n, 60)
                await batch(session, t, [bodies[stream]], stream, 16, n, 60)
        except Exception as e:
            t.error = f"warm-up failed: {type(e).__name__}: {e} {tail(t.log)}".strip()
        if t.error is not None and "warm-up" not in t.error:
            t.error = f"warm-up: {t.error} {tail(t.log)}".strip()
        _reset(t)


Times = tuple[list[float], list[float]]  # (first-chunk, last-byte) seconds of a batch


async def _rounds(targets: list[Target], rounds: int,
                  run_batch: Callable[[Target, int], Awaitable[Times]], fake_pid: int,
                  record: Callable[[Target, Times, int, int], None], what: str) -> None:
    """``rounds`` rounds over the live targets, order rotated each round; ``record`` gets each
    batch's times and the CPU time (ns) the target's process and the fake used meanwhile."""
    for r in range(rounds):
        live = [t for t in targets if t.error is None]
        if not live:
            return
        for t in live[r % len(live):] + live[:r % len(live)]:
            relay0, fake0 = cpu_ns(t.pid), cpu_ns(fake_pid)
            try:
                times = await run_batch(t, r)
            except Exception as e:
                t.error = f"failed during {what}: {type(e).__name__}: {e}"
                continue
            record(t, times, cpu_ns(t.pid) - relay0, cpu_ns(fake_pid) - fake0)


async def measure(session: aiohttp.ClientSession, targets: list[Target],
                  bodies: dict[bool, bytes], plan: Plan, fake_pid: int,
                  progress: Callable[[str], None]) -> dict[tuple[str, int], Cell]:
    """Cells keyed by (metric, concurrency); metric is non-streamed / first chunk / last byte."""
    cells: dict[tuple[str, int], Cell] = {}
    for conc in (1, 16):
        for mode, stream in MODES:
            names = ["first chunk", "last byte"] if stream else ["non-streamed"]
            for name in names:
                cells[(name, conc)] = Cell({t.key: [] for t in targets})

            async def run_batch(t: Target, r: int, stream: bool = stream, conc: int = conc
                                ) -> Times:
                kind = "litellm" if t.key == "litellm" else "fast"
                return await batch(session, t, [bodies[stream]], stream, conc,
                                   plan.per_round[(kind, conc)], plan.max_batch_s)

            def record(t: Target, times: Times, relay: int, fake: int, stream: bool = stream,
                       conc: int = conc, names: list[str] = names) -> None:
                firsts, lasts = times
                for name in names:
                    cells[(name, conc)].add_cpu(t.key, relay, fake, len(lasts))
                if stream:
                    cells[("first chunk", conc)].samples[t.key] += firsts
                    cells[("last byte", conc)].samples[t.key] += lasts
                else:
                    cells[("non-streamed", conc)].samples[t.key] += lasts

            started = time.perf_counter()
            await _rounds(targets, plan.rounds, run_batch, fake_pid, record, f"{mode} c={conc}")
            progress(f"  measured {mode:13s} c={conc:<2d} in "
                     f"{time.perf_counter() - started:5.1f} s")
    return cells


def large_targets(targets: list[Target]) -> list[Target]:
    """Fresh copies of direct, the bare relay and context-proxy: a failure of the large
    scenario must not disqualify them from the other tables."""
    return [dataclasses.replace(t, requests=0, errors=0, first_error="") for t in targets
            if t.key in ("direct", "bare", "cp") and t.error is None]


@dataclass
class LargeRun:
    """What the large scenario measured: its cell, its own copies of the targets, and
    context-proxy's response headers to the last warm-up body (window, masking, compaction)."""

    title: str
    cell: Cell
    targets: list[Target]
    headers: dict[str, str]


async def measure_large(session: aiohttp.ClientSession, targets: list[Target], grow: Growing,
                        plan: Plan, fake_pid: int, progress: Callable[[str], None]) -> LargeRun:
    """The growing conversation at concurrency 1, non-streamed: each target gets the same
    bodies in each round (round ``r`` sends ``body(r * n)`` … ``body(r * n + n - 1)``), after a
    warm-up of ``body(-warmup)`` … ``body(-1)``, so each request has one turn more than the
    target's previous one."""
    started = time.perf_counter()
    n = plan.large_per_round
    last = plan.rounds * n - 1
    title = (f"large agent conversation, concurrency 1, non-streamed: {grow.count(0):,}-"
             f"{grow.count(last):,} messages, {len(grow.body(0)) / 1e6:.2f}-"
             f"{len(grow.body(last)) / 1e6:.2f} MB, one turn more per request")
    warm_bodies = [grow.body(i) for i in range(-grow.warmup, 0)]
    headers: dict[str, str] = {}
    for t in targets:
        try:
            await batch(session, t, warm_bodies, False, 1, len(warm_bodies), 300)
            if t.errors:
                raise RequestFailed(t.first_error)
            if t.key == "cp":
                headers = await probe(session, t, warm_bodies[-1])
        except Exception as e:
            t.error = f"warm-up failed: {type(e).__name__}: {e} {tail(t.log)}".strip()
        _reset(t)
    cell = Cell({t.key: [] for t in targets})
    bodies: dict[int, list[bytes]] = {}

    async def run_batch(t: Target, r: int) -> Times:
        if r not in bodies:  # built by the round's first target, before its first request
            bodies.clear()
            bodies[r] = [grow.body(i) for i in range(r * n, (r + 1) * n)]
        return await batch(session, t, bodies[r], False, 1, n, 300)

    def record(t: Target, times: Times, relay: int, fake: int) -> None:
        cell.add_cpu(t.key, relay, fake, len(times[1]))
        cell.samples[t.key] += times[1]

    await _rounds(targets, plan.rounds, run_batch, fake_pid, record, "large")
    progress(f"  measured {'large':13s} c=1  in {time.perf_counter() - started:5.1f} s "
             "(warm-up included)")
    return LargeRun(title, cell, targets, headers)


Body = Callable[[int], bytes]
SCENARIO_WARM_BASE = 50_000_000  # warm-up bodies: indices no measured round uses


async def measure_scenarios(session: aiohttp.ClientSession, targets: list[Target],
                            scenarios: dict[str, tuple[str, Body]], plan: Plan, fake_pid: int,
                            progress: Callable[[str], None]) -> dict[tuple[str, int], Cell]:
    """Cells keyed by (scenario name, concurrency), non-streamed. Round ``r`` sends every
    target the same bodies, ``body(base + i)`` for the round's ``n`` requests, where no other
    round or concurrency uses those indices: each request is new to every target."""
    cells: dict[tuple[str, int], Cell] = {}
    for name, (_, body) in scenarios.items():
        for t in targets:  # the scenario's first requests (new shapes, encodings) go unmeasured
            if t.error is None:
                n = 16 if t.key == "litellm" else 64
                await batch(session, t, [body(SCENARIO_WARM_BASE + i) for i in range(n)],
                            False, 16, n, 60)
                _reset(t)
        for conc in (1, 16):
            cell = cells[(name, conc)] = Cell({t.key: [] for t in targets})
            built: dict[int, list[bytes]] = {}

            async def run_batch(t: Target, r: int, conc: int = conc, body: Body = body,
                                built: dict[int, list[bytes]] = built) -> Times:
                n = plan.per_round[("litellm" if t.key == "litellm" else "fast", conc)]
                if r not in built:  # built before the round's first batch is timed
                    base = 1_000_000 * conc + 10_000 * r
                    built.clear()
                    built[r] = [body(base + i) for i in range(plan.per_round[("fast", conc)])]
                return await batch(session, t, built[r][:n], False, conc, n, plan.max_batch_s)

            def record(t: Target, times: Times, relay: int, fake: int,
                       cell: Cell = cell) -> None:
                cell.add_cpu(t.key, relay, fake, len(times[1]))
                cell.samples[t.key] += times[1]

            started = time.perf_counter()
            await _rounds(targets, plan.rounds, run_batch, fake_pid, record, f"{name} c={conc}")
            progress(f"  measured {name:13s} c={conc:<2d} in "
                     f"{time.perf_counter() - started:5.1f} s")
    return cells
