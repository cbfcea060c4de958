"""Serving through a store outage: three replicas on one PostgreSQL schema behind the TCP
forwarder of ``proxy.testing.forwarder``, 30 clients of mixed traffic, a 10 s silent
partition (bytes dropped, no reset) and then a 10 s refused port.

Every server is a process of its own: the replicas, the fake upstream (``--serve-fake``) and
the forwarder (``ForwarderProcess``), so none of them waits behind this process's load
generator for the interpreter lock; the request bodies are serialized once.

Clients: 24 on keys seen before the outage by every replica (chat completions, each its own
conversation that grows until it is compacted, and some ``/v1/responses``), 6 on keys first
used during it (an unseen key each time: a 503 ``store_unavailable`` is their right answer
while the store is away). One more client, a process of its own, polls ``/healthz`` of every
replica every 20 ms.

Reported: the slowest answer of each phase, how answers split (200 / 503 / other), the
``/healthz`` p99 and max, how long after each return the rate is back to the baseline's, and
after the run the dividers acknowledged (``X-Context-Divider-Id``) and upstream usage
(requests counted) that are in the store, against the lost-writes metric.

    .venv/bin/python bench/store_outage.py [--database-url URL] [--outage-s 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

import aiohttp  # noqa: E402
import orjson  # noqa: E402

from proxy.store import Store  # noqa: E402
from proxy.store.postgres import connect  # noqa: E402
from proxy.testing import agent  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402
from proxy.testing.forwarder import ForwarderProcess  # noqa: E402
from proxy.testing.replicas import Replicas  # noqa: E402

DEFAULT_DB = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
MODEL = "gpt-4o-w16k"
POLICIES = f"""defaults:
  masking: {{enabled: false}}
  compaction: {{summary_model: summarizer, summary_timeout_s: 3}}
  models: {{{MODEL}: 16000, summarizer: 1000000}}
"""
SEEN, UNSEEN = 24, 6
BOUND_S = 1.5
SAID = ("X-Request-Id", "X-Context-Compaction", "X-Context-Summary-Wait-Ms",
        "X-Context-Overhead-Ms")  # of each answer --verbose lists
SPEC = agent.AgentSpec(seed=7, output_tokens=(600, 900), thought_words=(5, 10))


@dataclass
class Run:
    phase: str = "before"
    # (phase, kind, start, seconds, status): kind "seen" or "unseen"
    answers: list[tuple[str, str, float, float, int]] = field(default_factory=list)
    # (phase, kind, start, seconds, status, replica port, what the proxy said): over the
    # bound, or not a 200 outside an outage; printed with --verbose
    odd: list[tuple[str, str, float, float, int, str, str]] = field(default_factory=list)
    health: list[tuple[str, float]] = field(default_factory=list)
    phases: list[tuple[str, float]] = field(default_factory=list)  # (phase, wall clock start)
    starts: dict[str, float] = field(default_factory=dict)  # phase -> monotonic start
    dividers: set[str] = field(default_factory=set)
    requests_by_conv: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stop: bool = False


def schema_url(server: str, schema: str, port: int) -> str:
    parts = urlsplit(server)
    host = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
    url = urlunsplit(parts._replace(netloc=f"{host}:{port}"))
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


async def timed(run: Run, session: aiohttp.ClientSession, method: str, url: str,
                kind: str = "seen", **kw: Any) -> tuple[int, Mapping[str, str]]:
    t0 = time.monotonic()
    phase = run.phase
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=30),
                                   **kw) as r:
            await r.read()
            status, headers = r.status, r.headers.copy()
    except (aiohttp.ClientError, TimeoutError):
        status, headers = 0, {}
    took = time.monotonic() - t0
    run.answers.append((phase, kind, t0, took, status))
    if took > BOUND_S or (status != 200 and phase in ("before", "between", "after")):
        said = " ".join(f"{h.removeprefix('X-Context-')}={headers[h]}" for h in SAID
                        if h in headers)
        run.odd.append((phase, kind, t0, took, status, urlsplit(url).netloc.rsplit(":", 1)[1],
                        said))
    return status, headers


def bodies() -> list[bytes]:
    """The chat bodies every seen client sends in turn (one conversation that grows)."""
    messages = agent.conversation(SPEC, 40)
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return [orjson.dumps({"model": MODEL, "messages": messages[:end], "tools": agent.TOOLS})
            for end in ends]


BODIES: list[bytes] = []
EVERY_S: list[float] = []  # --every-s: each seen client's request period (else closed loop)


async def pause(started: float) -> None:
    """Closed loop (a 50 ms pause after each answer: as much load as the machine takes), or
    one request per ``--every-s`` seconds (a fixed rate, below saturation)."""
    if EVERY_S:
        await asyncio.sleep(max(0.0, started + EVERY_S[0] - time.monotonic()))
    else:
        await asyncio.sleep(0.05)


async def seen_client(run: Run, r: Replicas, session: aiohttp.ClientSession, key: str,
                      n: int) -> None:
    conv, turn = f"c{n}-{secrets.token_hex(3)}", 0
    while not run.stop:
        started = time.monotonic()
        base = r.url(r.next_index())
        if n % 4 == 3:  # some Responses API traffic
            await timed(run, session, "POST", base + "/responses",
                        headers={"Authorization": f"Bearer {key}"},
                        json={"model": "gpt-4o", "input": "hi"})
        else:
            status, headers = await timed(run, session, "POST", base + "/chat/completions",
                                          data=BODIES[turn % len(BODIES)], headers={
                                              "Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json",
                                              "X-Conversation-Id": conv})
            if status == 200:
                run.requests_by_conv[conv] += 1
                if headers.get("X-Context-Divider-Id"):
                    run.dividers.add(headers["X-Context-Divider-Id"])
            turn += 1
        await pause(started)


async def unseen_client(run: Run, r: Replicas, session: aiohttp.ClientSession) -> None:
    while not run.stop:
        key = await asyncio.to_thread(new_key) if run.phase in ("before", "after") \
            else run_keys.pop() if run_keys else None
        if key is None:
            await asyncio.sleep(0.1)
            continue
        await timed(run, session, "POST", r.url(r.next_index()) + "/chat/completions", "unseen",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
        await asyncio.sleep(0.1)


run_keys: list[str] = []  # keys made before the outage, first used during it
# This process's own store, reached without the forwarder (the partition is the replicas').
key_store: list[Store] = []


def new_key() -> str:
    return key_store[0].keys.create("acme")[1]


POLLER = """
import json, sys, time, httpx
urls, until = sys.argv[1].split(","), time.time() + float(sys.argv[2])
out = []
with httpx.Client(timeout=10) as c:
    while time.time() < until:
        for u in urls:
            t0 = time.time()
            try:
                c.get(u)
            except httpx.HTTPError:
                pass
            out.append((t0, time.time() - t0))
        time.sleep(0.02)
print(json.dumps(out))
"""


async def health_poller(r: Replicas, seconds: float) -> list[tuple[float, float]]:
    """``/healthz`` of every replica every 20 ms, from a process of its own (this one's loop
    also runs the fake upstream, the forwarder and 30 clients: it would time itself)."""
    urls = ",".join(r.url(i).removesuffix("/v1") + "/healthz" for i in range(r.count))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", POLLER, urls,
                                                str(seconds), stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return [(float(t), float(d)) for t, d in json.loads(out)]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def rate_of_200s(run: Run, start: float) -> float:
    """200s per second among the answers that ended in the half second from ``start``."""
    return 2 * sum(1 for a in run.answers if a[4] == 200 and start <= a[2] + a[3] < start + 0.5)


def report(run: Run, returns: list[tuple[str, float]], fwd: ForwarderProcess,
           verbose: bool) -> None:
    print(f"{'phase':<10} {'kind':<6} {'answers':>7} {'200':>5} {'503':>5} {'other':>5} "
          f"{'max s':>6} {'>1.5s':>5} {'healthz p99 ms':>14} {'max ms':>7}")
    for phase in ("before", "partition", "between", "refused", "after"):
        hs = [h * 1000 for p, h in run.health if p == phase]
        for kind in ("seen", "unseen"):
            got = [a for a in run.answers if a[0] == phase and a[1] == kind]
            codes = [a[4] for a in got]
            print(f"{phase:<10} {kind:<6} {len(got):>7} {codes.count(200):>5} "
                  f"{codes.count(503):>5} {len(codes) - codes.count(200) - codes.count(503):>5} "
                  f"{max((a[3] for a in got), default=0):>6.2f} "
                  f"{sum(a[3] > BOUND_S for a in got):>5} {pct(hs, 0.99):>14.1f} "
                  f"{max(hs, default=0):>7.1f}")
    before = [a for a in run.answers if a[0] == "before" and a[4] == 200]
    span = (max(a[2] for a in before) - min(a[2] for a in before)) or 1
    base_rate = len(before) / span
    for name, at in returns:
        # first 0.5 s window after the return whose rate of 200s reaches 90% of the baseline
        t, back = at, None
        while t < at + 8:
            if rate_of_200s(run, t) >= 0.9 * base_rate:
                back = t + 0.5 - at
                break
            t += 0.1
        print(f"after the {name} ended: full rate ({base_rate:.0f}/s) again within "
              f"{back if back is not None else float('nan'):.1f} s")
        if verbose:  # the rate in each half second around the return
            rates = [round(rate_of_200s(run, at + k / 2)) for k in range(-4, 12)]
            print(f"  200s per second in each 0.5 s from 2 s before: {rates}")
    print(f"bytes dropped by the partition: {fwd.dropped}")
    if verbose:
        print("answers over the bound, and answers other than 200 outside an outage "
              "(s after their phase began):")
        for phase, kind, t0, took, status, port, said in sorted(run.odd, key=lambda a: a[2]):
            print(f"  {phase:<9} +{t0 - run.starts.get(phase, t0):5.2f} s  {kind:<6} "
                  f"{status:>3} {took:5.2f} s  replica :{port} {said}")


def check_store(url: str, run: Run, metrics: list[str]) -> None:
    with connect(url) as conn:
        ids = {r[0] for r in conn.execute("SELECT id FROM compactions").fetchall()}
        usage = dict(conn.execute("SELECT conversation, SUM(requests) FROM usage_totals "
                                  "GROUP BY conversation").fetchall())
        convs = {r[0]: r[1] for r in conn.execute(
            "SELECT public_id, id FROM conversations WHERE public_id IS NOT NULL").fetchall()}
    missing = run.dividers - ids
    short = {c: n for c, n in run.requests_by_conv.items()
             if usage.get(convs.get(c, ""), 0) < n}
    lost = sum(float(line.rsplit(" ", 1)[1]) for text in metrics for line in text.splitlines()
               if line.startswith("context_proxy_store_writes_lost_total{"))
    print(f"dividers acknowledged: {len(run.dividers)}, in the store: "
          f"{len(run.dividers) - len(missing)}; conversations with usage short of the 200s "
          f"answered: {len(short)} of {len(run.requests_by_conv)}; writes counted lost: "
          f"{lost:.0f}")


async def main(args: argparse.Namespace) -> None:
    schema = "bench_outage_" + secrets.token_hex(4)
    with connect(args.database_url) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    fwd = ForwarderProcess(urlsplit(args.database_url).port or 5432).start()
    fake = await start_fake()
    BODIES[:] = bodies()
    EVERY_S[:] = [args.every_s] if args.every_s else []
    url = schema_url(args.database_url, schema, fwd.port)
    tmp = Path(tempfile.mkdtemp(prefix="store-outage-"))
    run = Run()
    try:
        with Replicas(tmp, url, 3, policies=POLICIES, upstream=fake.url) as r:
            key_store.append(Store(schema_url(args.database_url, schema,
                                              urlsplit(args.database_url).port or 5432)))
            seen = [new_key() for _ in range(SEEN)]
            run_keys.extend(new_key() for _ in range(1500))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
                # Each replica validates keys for itself: every seen key is used once on each
                # (the clients then go round-robin, as behind a load balancer).
                await asyncio.gather(*(timed(
                    Run(), s, "POST", r.url(i) + "/chat/completions",
                    headers={"Authorization": f"Bearer {k}"},
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
                    for k in seen for i in range(r.count)))
                tasks = [asyncio.create_task(seen_client(run, r, s, seen[i], i))
                         for i in range(SEEN)]
                tasks += [asyncio.create_task(unseen_client(run, r, s)) for _ in range(UNSEEN)]
                total = args.warm_s + 2 * args.outage_s + 2 * args.gap_s
                pids = {"this load generator": os.getpid(), "fake upstream": fake.proc.pid,
                        "forwarder": fwd.pid,
                        **{f"replica {i}": p.pid for i, p in enumerate(r.procs)}}
                cpu0, load0 = {n: cpu_seconds(p) for n, p in pids.items()}, os.getloadavg()
                poller = asyncio.create_task(health_poller(r, total))
                returns = []
                for phase, secs, start, end in (
                        ("before", args.warm_s, None, None),
                        ("partition", args.outage_s, fwd.partition, fwd.heal),
                        ("between", args.gap_s, None, None),
                        ("refused", args.outage_s, fwd.down, fwd.up),
                        ("after", args.gap_s, None, None)):
                    if start is not None:
                        start()
                    run.phase = phase
                    run.phases.append((phase, time.time()))
                    run.starts[phase] = time.monotonic()
                    await asyncio.sleep(secs)
                    if end is not None:
                        end()
                        returns.append((phase, time.monotonic()))
                run.stop = True
                await asyncio.gather(*tasks, return_exceptions=True)
                cpu = {n: cpu_seconds(p) - cpu0[n] for n, p in pids.items()}
                load1 = os.getloadavg()
                for t, d in await poller:
                    phase = [p for p, at in run.phases if at <= t][-1:] or ["before"]
                    run.health.append((phase[0], d))
                await asyncio.sleep(3)  # the usage flush (every 2 s) and the queue drain
                metrics = []
                for i in range(3):
                    async with s.get(r.url(i).removesuffix("/v1") + "/metrics") as m:
                        metrics.append(await m.text())
            report(run, returns, fwd, args.verbose)
            if args.dump:  # every answer, and the returns, for a closer look
                Path(args.dump).write_text(json.dumps({"answers": run.answers,
                                                       "returns": returns}))
            check_store(url, run, metrics)
            print(f"load average (1 min) {load0[0]:.1f} at the start, {load1[0]:.1f} at the end "
                  f"({os.cpu_count()} cores); CPU seconds over the {total:.0f} s: "
                  + ", ".join(f"{n} {c:.1f}" for n, c in cpu.items()))
    finally:
        for store in key_store:
            store.close()
        fwd.stop()
        fake.stop()
        with connect(args.database_url) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@dataclass
class FakeProcess:
    proc: asyncio.subprocess.Process
    url: str

    def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()


async def start_fake() -> FakeProcess:
    proc = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve-fake",
                                                stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    if not url.startswith("http://"):
        raise RuntimeError("the fake upstream did not start")
    return FakeProcess(proc, url)


def serve_fake() -> None:
    """Child process: the fake upstream (no request log: the run is long) until the bench is
    gone; prints its base URL."""
    fake, parent = FakeUpstream(record=False), os.getppid()

    async def serve() -> None:
        print(await fake.start(), flush=True)
        while os.getppid() == parent:
            await asyncio.sleep(0.5)

    asyncio.run(serve())


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-fake"]:
        serve_fake()
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_DB)
    parser.add_argument("--outage-s", type=float, default=10.0)
    parser.add_argument("--warm-s", type=float, default=8.0)
    parser.add_argument("--gap-s", type=float, default=8.0)
    parser.add_argument("--every-s", type=float, default=None,
                        help="each seen client sends a request every this many seconds (a "
                             "fixed rate; default: a 50 ms pause after each answer, as much "
                             "as the machine takes)")
    parser.add_argument("--dump", metavar="FILE",
                        help="write every answer (phase, kind, start, seconds, status) and "
                             "the returns' times to FILE as JSON")
    parser.add_argument("--verbose", action="store_true",
                        help="list each answer over the bound and each non-200 outside an "
                             "outage, with its replica and X-Request-Id")
    asyncio.run(main(parser.parse_args()))
