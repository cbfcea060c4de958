"""Throughput and latency of context-proxy at concurrency 16: one replica on SQLite, one on
PostgreSQL, and three on one PostgreSQL schema behind a round-robin client, in one run.

Every server is its own process on a loopback port: the fake upstream (``overhead.py
--serve-fake``, ``_servers.start_fake``) and each replica (``python -m proxy.cli serve``). The
load generator is one aiohttp ``ClientSession`` here: 16 workers, each its own conversation
(``X-Conversation-Id``), sending the fixed 50-message request (``_workload.small_body``, under
every trigger), so each request pays the per-conversation store reads of the request path.
Targets are measured in alternating rounds; figures are ratios to one replica on SQLite.

PostgreSQL: ``--database-url`` (default ``$BENCH_DATABASE_URL``, else the local server's
``test`` database); the run makes a fresh schema there and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):  # the proxy package, and this file's siblings
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from _load import RequestFailed, one, pct  # noqa: E402
from _procs import Procs, Target, child_env  # noqa: E402
from _servers import UPSTREAM_KEY, _ready, free_port, start_fake  # noqa: E402
from _workload import small_body  # noqa: E402

from proxy.store import Store  # noqa: E402
from proxy.store.postgres import connect  # noqa: E402

CONCURRENCY = 16
DEFAULT_DB = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Setup:
    """One measured configuration: its replicas (targets) and the samples of all rounds."""

    key: str
    label: str
    replicas: list[Target] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the measured batches
    errors: int = 0
    error: str | None = None


async def start_replica(procs: Procs, session: aiohttp.ClientSession, name: str,
                        upstream: str, store_env: dict[str, str], key: str) -> Target:
    port = free_port()
    env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                     "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                     "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_HOST": "127.0.0.1",
                     "CONTEXT_PROXY_DB": str(procs.tmp / f"{name}.db"),
                     "CONTEXT_PROXY_DATABASE_URL": "", **store_env})
    proc = procs.spawn(name, [sys.executable, "-m", "proxy.cli", "serve"], env)
    return await _ready(Target(name, name, log=procs.tmp / f"{name}.log"), session, proc, port,
                        "/healthz", 60, key)


def new_key(target: Path | str) -> str:
    store = Store(target)  # also migrates: the replicas then start on a ready schema
    try:
        return store.keys.create("bench")[1]
    finally:
        store.close()


SCHEMA = "bench_replicas_" + secrets.token_hex(4)  # SCHEMA_1 and SCHEMA_3, dropped after


def url_for(server: str, schema: str) -> str:
    """The server's URL with ``schema`` first on the search path."""
    sep = "&" if "?" in server else "?"
    return f"{server}{sep}options={quote(f'-csearch_path={schema}')}"


def schemas(server: str, create: bool) -> None:
    with connect(server) as conn:
        for n in (1, 3):
            conn.execute(f"CREATE SCHEMA {SCHEMA}_{n}" if create
                         else f"DROP SCHEMA IF EXISTS {SCHEMA}_{n} CASCADE")


async def start_setup(procs: Procs, session: aiohttp.ClientSession, upstream: str,
                      s: Setup, target: Path | str, count: int) -> None:
    env = {"CONTEXT_PROXY_DATABASE_URL": target} if isinstance(target, str) else \
        {"CONTEXT_PROXY_DB": str(target)}
    try:
        key = await asyncio.to_thread(new_key, target)
        s.replicas = list(await asyncio.gather(*(
            start_replica(procs, session, f"{s.key}-{i}", upstream, env, key)
            for i in range(count))))
    except Exception as e:
        s.error = f"did not start: {type(e).__name__}: {e}"


async def start_setups(procs: Procs, session: aiohttp.ClientSession, upstream: str,
                       server: str) -> list[Setup]:
    setups = [(Setup("sqlite-1", "1 replica, SQLite"), procs.tmp / "sqlite-1.db", 1),
              (Setup("pg-1", "1 replica, PostgreSQL"), url_for(server, f"{SCHEMA}_1"), 1),
              (Setup("pg-3", "3 replicas, PostgreSQL"), url_for(server, f"{SCHEMA}_3"), 3)]
    for s, target, count in setups:  # one after the other: start-up is CPU-bound
        await start_setup(procs, session, upstream, s, target, count)
    return [s for s, _, _ in setups]


async def batch(session: aiohttp.ClientSession, s: Setup, body: bytes, n: int,
                record: bool) -> None:
    """``n`` requests by 16 workers, each its own conversation, round-robin over the setup's
    replicas (one client connection pool, like a load balancer's)."""
    sent = 0
    t0 = time.perf_counter()

    async def worker(w: int) -> None:
        nonlocal sent
        mine = [replace(t, headers={**t.headers, "X-Conversation-Id": f"bench-{s.key}-{w}"})
                for t in s.replicas]  # each worker its own conversation, on every replica
        while sent < n:
            t = mine[sent % len(mine)]
            sent += 1
            try:
                _, last = await asyncio.wait_for(one(session, t, body, False), 30)
            except (RequestFailed, aiohttp.ClientError, TimeoutError) as e:
                s.errors += 1
                if s.errors > max(5, n // 50):
                    s.error = f"{s.errors} requests failed, the last: {type(e).__name__}: {e}"
                continue
            if record:
                s.latencies.append(last)

    gc.disable()
    try:
        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    finally:
        gc.enable()
    if record:
        s.seconds += time.perf_counter() - t0


async def measure(session: aiohttp.ClientSession, setups: list[Setup], rounds: int,
                  per_round: int) -> None:
    body = small_body(False)
    live = [s for s in setups if s.error is None]
    for s in live:
        await batch(session, s, body, per_round // 2, record=False)  # warm-up
    for r in range(rounds):
        for s in live[r % len(live):] + live[:r % len(live)]:
            if s.error is None:
                await batch(session, s, body, per_round, record=True)


def report(setups: list[Setup]) -> list[str]:
    base = next((s for s in setups if s.key == "sqlite-1" and s.error is None), None)
    lines = [f"\nconcurrency {CONCURRENCY}, non-streamed, fixed 50-message request "
             f"(ratios to 1 replica on SQLite)",
             f"{'setup':<24}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'x req/s':>9}"
             f"{'x p50':>8}{'x p99':>8}{'errors':>8}"]

    def stats(s: Setup) -> tuple[float, float, float]:
        xs = sorted(s.latencies)
        return len(xs) / s.seconds if s.seconds else 0.0, pct(xs, 50) * 1e3, pct(xs, 99) * 1e3

    b = stats(base) if base is not None else None
    for s in setups:
        if s.error is not None:
            lines.append(f"{s.label:<24}  n/a: {s.error}")
            continue
        rps, p50, p99 = stats(s)
        ratios = (f"{rps / b[0]:>9.2f}{p50 / b[1]:>8.2f}{p99 / b[2]:>8.2f}" if b
                  else f"{'n/a':>9}{'n/a':>8}{'n/a':>8}")
        lines.append(f"{s.label:<24}{rps:>9.0f}{p50:>9.2f}{p99:>9.2f}{ratios}{s.errors:>8}")
    pg1 = next((s for s in setups if s.key == "pg-1" and s.error is None), None)
    if b is not None and pg1 is not None:
        _, p50, p99 = stats(pg1)
        lines.append(f"\nPostgreSQL over SQLite, one replica: p50 x{p50 / b[1]:.2f} "
                     f"(+{p50 - b[1]:.2f} ms), p99 x{p99 / b[2]:.2f} (+{p99 - b[2]:.2f} ms)")
    return lines


async def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, flush=True)

    say(f"context-proxy replicas bench: {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}{', quick' if args.quick else ''}")
    rounds, per_round = (3, 160) if args.quick else (6, 480)
    t_start = time.perf_counter()
    await asyncio.to_thread(schemas, args.database_url, True)
    try:
        with tempfile.TemporaryDirectory(prefix="cp-bench-replicas-") as tmpdir:
            procs = Procs(Path(tmpdir))
            async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=128), auto_decompress=False,
                    headers={"Content-Type": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=120)) as session:
                try:
                    upstream = await start_fake(procs, 0.0)
                    setups = await start_setups(procs, session, upstream, args.database_url)
                    say(f"servers up in {time.perf_counter() - t_start:.1f} s; measuring "
                        f"{rounds} rounds of {per_round} requests per setup")
                    await measure(session, setups, rounds, per_round)
                finally:
                    procs.stop()
    finally:
        await asyncio.to_thread(schemas, args.database_url, False)
    for line in report(setups):
        say(line)
    say(f"\ntotal run time {time.perf_counter() - t_start:.0f} s")
    return 0 if all(s.error is None for s in setups) else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and requests")
    p.add_argument("--database-url", default=DEFAULT_DB,
                   help="the PostgreSQL server to make the run's schemas on")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
