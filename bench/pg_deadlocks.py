"""Deadlocks between replicas' writes on PostgreSQL: 50 clients for 60 s on three replicas.

The replicas share a database of their own, made for the run (so PostgreSQL's per-database
``pg_stat_database.deadlocks`` counts theirs alone) and dropped after. Clients: 40 with a
conversation each and 10 that share two conversations (five each), every request to the next
replica in turn, chat completions that grow until they are compacted (a 16k-token window), so
each replica's usage flush, dividers, spills and leases touch the same rows as the others'.

Reported: answers by status, the deadlocks PostgreSQL counted in the database, the
``deadlock detected`` lines its server log gained during the run (the log is found with
``pg_current_logfile()``, else Debian's ``/var/log/postgresql``; "not readable" when neither
is), ERROR lines and tracebacks in the replicas' logs, and whether every answered request is
in the stored usage (``usage_totals.requests``) or counted lost
(``context_proxy_store_writes_lost_total``). Exits 1 on a deadlock, a traceback or a figure
missing.

    .venv/bin/python bench/pg_deadlocks.py [--clients 50] [--seconds 60] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from store_outage import MODEL, POLICIES, FakeProcess, bodies, start_fake  # noqa: E402

from proxy.store import Store  # noqa: E402
from proxy.store.postgres import connect  # noqa: E402
from proxy.testing.replicas import Replicas  # noqa: E402

DEFAULT_DB = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SHARED = 10  # clients that share conversations, five to a conversation


def database_url(server: str, name: str) -> str:
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def server_log() -> Path | None:
    """The PostgreSQL server's log file, when this process can read it."""
    try:
        with connect(DEFAULT_DB) as conn:
            row = conn.execute("SELECT pg_current_logfile(), current_setting('data_directory')"
                               ).fetchone()
    except Exception:
        row = None
    candidates = [Path(row[1]) / row[0]] if row and row[0] else []
    candidates += sorted(Path("/var/log/postgresql").glob("postgresql-*-main.log"))
    return next((p for p in candidates if os.access(p, os.R_OK)), None)


async def client(r: Replicas, session: aiohttp.ClientSession, key: str, conv: str,
                 chats: list[bytes], until: float, statuses: Counter[int]) -> None:
    turn = 0
    while time.monotonic() < until:
        try:
            async with session.post(r.url(r.next_index()) + "/chat/completions",
                                    data=chats[turn % len(chats)], timeout=aiohttp.ClientTimeout(
                                        total=60), headers={
                                        "Authorization": f"Bearer {key}",
                                        "Content-Type": "application/json",
                                        "X-Conversation-Id": conv}) as resp:
                await resp.read()
                statuses[resp.status] += 1
        except (aiohttp.ClientError, TimeoutError):
            statuses[0] += 1
        turn += 1
        await asyncio.sleep(0.05)


def lost_writes(texts: list[str]) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for text in texts for line in text.splitlines()
               if line.startswith("context_proxy_store_writes_lost_total{"))


async def run(args: argparse.Namespace, url: str, fake: FakeProcess, log: Path | None
              ) -> int:
    offset = log.stat().st_size if log else 0
    tmp = Path(tempfile.mkdtemp(prefix="pg-deadlocks-"))
    statuses: Counter[int] = Counter()
    with connect(url) as conn:
        before = conn.execute("SELECT deadlocks FROM pg_stat_database "
                              "WHERE datname = current_database()").fetchone()[0]
    with Replicas(tmp, url, 3, policies=POLICIES, upstream=fake.url) as r:
        keys = [r.create_key() for _ in range(args.clients)]
        chats = bodies()
        own = args.clients - SHARED
        convs = [f"own-{i}-{secrets.token_hex(3)}" for i in range(own)]
        convs += [f"shared-{i // 5}" for i in range(SHARED)]
        started = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            await asyncio.gather(*(client(r, s, keys[i], convs[i], chats,
                                          started + args.seconds, statuses)
                                   for i in range(args.clients)))
            took = time.monotonic() - started
            await asyncio.sleep(4)  # the last usage flush (every 2 s) and queued writes
            metrics = []
            for i in range(r.count):
                async with s.get(r.url(i).removesuffix("/v1") + "/metrics") as m:
                    metrics.append(await m.text())
        logs = [r.log(i) for i in range(r.count)]
    with connect(url) as conn:
        after = conn.execute("SELECT deadlocks FROM pg_stat_database "
                             "WHERE datname = current_database()").fetchone()[0]
        stored = conn.execute("SELECT COALESCE(SUM(requests), 0) FROM usage_totals "
                              "WHERE model = %s", [MODEL]).fetchone()[0]
    gained = log.read_text(errors="replace")[offset:] if log else ""
    in_log = gained.count("deadlock detected") if log else None
    errors = sum(len(re.findall(r"^\S+ \S+ ERROR ", text, re.M)) for text in logs)
    tracebacks = sum(text.count("Traceback") for text in logs)
    lost = lost_writes(metrics)
    print(f"{args.clients} clients for {took:.0f} s on three replicas: answers "
          + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
          + f" ({sum(statuses.values()) / took:.0f}/s)")
    print(f"deadlocks counted by PostgreSQL in the database: {after - before}; "
          f"'deadlock detected' lines the server log gained: "
          f"{in_log if in_log is not None else 'not readable'} ({log or 'no log found'})")
    print(f"replica logs: {errors} ERROR lines, {tracebacks} tracebacks; requests answered 200: "
          f"{statuses[200]}, in the stored usage: {stored}, writes counted lost: {lost:.0f}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    bad = after - before or in_log or tracebacks or (stored + lost < statuses[200])
    return 1 if bad else 0


async def main(args: argparse.Namespace) -> int:
    name = "bench_deadlocks_" + secrets.token_hex(4)
    with connect(args.database_url) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = database_url(args.database_url, name)
    Store(url).close()  # the schema, migrated once before the replicas start
    fake = await start_fake()
    try:
        return await run(args, url, fake, server_log())
    finally:
        fake.stop()
        with connect(args.database_url) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--database-url", default=DEFAULT_DB)
    raise SystemExit(asyncio.run(main(parser.parse_args())))
