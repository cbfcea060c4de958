"""Restarts of a proxy on SQLite in the middle of compactions: does any answer fail for waiting
on a lease the dead process left?

One ``serve`` process on a SQLite file, in front of the fake upstream (a process of its own,
each summary call taking ``--summary-delay-s``); ``--clients`` clients, each a conversation
that grows until it is compacted (a 16k-token window, then again every few turns), retrying
a request the restart cut. ``--restarts`` times the proxy is killed with SIGKILL after a random
1-3 s of traffic (so compactions, and their leases, are in flight) and started again on the
same file and port.

Reported: the answers by ``X-Context-Compaction`` outcome, the ``failed`` ones, the proxy's log
lines saying a request waited for another process's summary that never came, the leases each
start released (``released N lease(s) an earlier process left``), and the requests cut by a
kill (retried). Exits 1 when an answer failed for a dead lease.

    .venv/bin/python bench/sqlite_restarts.py [--restarts 20] [--clients 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from _procs import child_env  # noqa: E402
from _servers import free_port  # noqa: E402
from store_outage import POLICIES, bodies  # noqa: E402

from proxy.context.records.flights import LEASE_S  # noqa: E402
from proxy.store import Store  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402

WAITED = "another process was making its summary and none was stored in time"


def serve_fake(delay_s: float) -> None:
    """Child process: the fake upstream, each summary call ``delay_s`` long."""
    fake, parent = FakeUpstream(record=False, summary_delay_s=delay_s), os.getppid()

    async def serve() -> None:
        print(await fake.start(), flush=True)
        while os.getppid() == parent:
            await asyncio.sleep(0.5)

    asyncio.run(serve())


class Proxy:
    def __init__(self, tmp: Path, upstream: str) -> None:
        self.port = free_port()
        self.log = tmp / "proxy.log"
        self.env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                              "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-bench-upstream",
                              "CONTEXT_PROXY_DB": str(tmp / "proxy.db"),
                              "CONTEXT_PROXY_POLICIES": str(tmp / "policies"),
                              "CONTEXT_PROXY_PORT": str(self.port),
                              "CONTEXT_PROXY_HOST": "127.0.0.1"})
        (tmp / "policies").mkdir()
        (tmp / "policies" / "platform.yaml").write_text(POLICIES)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve"],
                                         cwd=BENCH.parent, env=self.env, stdout=out,
                                         stderr=out, start_new_session=True)

    async def ready(self, session: aiohttp.ClientSession) -> None:
        for _ in range(600):
            try:
                async with session.get(f"http://127.0.0.1:{self.port}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError("the proxy did not start")

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


async def client(proxy: Proxy, session: aiohttp.ClientSession, key: str, n: int,
                 chats: list[bytes], outcomes: Counter[str], stop: asyncio.Event) -> None:
    conv, turn = f"restart-{n}", 0
    while not stop.is_set():
        try:
            async with session.post(f"http://127.0.0.1:{proxy.port}/v1/chat/completions",
                                    data=chats[turn % len(chats)], headers={
                                        "Authorization": f"Bearer {key}",
                                        "Content-Type": "application/json",
                                        "X-Conversation-Id": conv},
                                    timeout=aiohttp.ClientTimeout(total=60)) as resp:
                await resp.read()
                if resp.status == 200:
                    outcomes[resp.headers.get("X-Context-Compaction", "?")] += 1
                    turn += 1
                else:
                    outcomes[f"status {resp.status}"] += 1
        except (aiohttp.ClientError, TimeoutError):
            outcomes["no answer: a kill or a start (retried)"] += 1
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.02)


async def main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="sqlite-restarts-"))
    fake = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-fake", str(args.summary_delay_s),
        stdout=asyncio.subprocess.PIPE)
    assert fake.stdout is not None
    upstream = (await fake.stdout.readline()).decode().strip()
    proxy = Proxy(tmp, upstream)
    store = Store(tmp / "proxy.db")
    keys = [store.keys.create("acme")[1] for _ in range(args.clients)]
    store.close()
    chats, outcomes, stop = bodies(), Counter[str](), asyncio.Event()
    rng = random.Random(args.seed)
    try:
        proxy.start()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            await proxy.ready(s)
            tasks = [asyncio.create_task(client(proxy, s, keys[i], i, chats, outcomes, stop))
                     for i in range(args.clients)]
            started, down = time.monotonic(), []
            for _ in range(args.restarts):
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                proxy.kill()
                killed = time.monotonic()
                proxy.start()
                await proxy.ready(s)
                down.append(time.monotonic() - killed)
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.gather(*tasks)
            took = time.monotonic() - started
        proxy.kill()
    finally:
        fake.terminate()
    log = proxy.log.read_text(errors="replace")
    waited = log.count(WAITED)
    released = [int(n) for n in re.findall(r"released (\d+) lease\(s\) an earlier process", log)]
    answered = sum(n for k, n in outcomes.items() if not k.startswith(("no answer", "status")))
    print(f"{args.restarts} SIGKILL restarts in {took:.0f} s, {args.clients} clients: "
          f"{answered} answers, by X-Context-Compaction: "
          + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    print(f"answers 'failed': {outcomes['failed']}; log lines of a wait for a summary another "
          f"process never stored: {waited}; leases released at the starts: "
          f"{sum(released)} over {len(released)} of {args.restarts + 1} starts; "
          f"tracebacks in the log: {log.count('Traceback')}")
    print(f"from each kill to /healthz answering again: median "
          f"{sorted(down)[len(down) // 2]:.1f} s, max {max(down):.1f} s (a compaction lease "
          f"the kill left runs out {LEASE_S:.0f} s after its last renewal)")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    return 1 if waited or log.count("Traceback") else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-fake"]:
        serve_fake(float(sys.argv[2]))
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--summary-delay-s", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=24)
    raise SystemExit(asyncio.run(main(parser.parse_args())))
