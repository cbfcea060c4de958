"""SIGTERM with requests in flight: what each client gets, and how soon the process is gone.

One ``serve`` process (SQLite, ``CONTEXT_PROXY_SHUTDOWN_GRACE_S``, 8 s by default) in front of
the fake upstream (a process of its own) whose answers take 30 s: a stream drips one event a
second, a whole answer comes after 30 s. ``--streams`` streamed and ``--whole`` non-streamed
requests (spread over chat completions, Responses and Messages) are sent; once every stream
has its first event and the whole ones have waited a second, the proxy gets SIGTERM.

Reported per kind: each client's outcome (a stream ending with its API's error event, or
complete; a whole request's status and whether its body is the API's error shape with
``x-should-retry: true``; "cut" when the connection ended with no answer), the time from the
signal to the last answer, and to the process's exit, against grace + 1 s. Exits 1 when a
client was cut or the exit came later.

    .venv/bin/python bench/shutdown.py [--streams 10] [--whole 10] [--grace-s 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from _procs import child_env  # noqa: E402
from _servers import free_port  # noqa: E402

from proxy.apis import APIS  # noqa: E402
from proxy.store import Store  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream, Fault  # noqa: E402

PATHS = {name: api.route for name, api in APIS.items()}
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "gpt-4o", "messages": [{"role": "user", "content": "count"}]},
    "responses": {"model": "gpt-4o", "input": "count"},
    "messages": {"model": "claude-x", "max_tokens": 64,
                 "messages": [{"role": "user", "content": "count"}]}}
ERROR_EVENT = {"chat": b'data: {"error"', "responses": b'data: {"error"',
               "messages": b"event: error"}


def whole_only(body: dict[str, Any]) -> bool:
    return not body.get("stream")


def serve_fake() -> None:
    """Child process: streams of 30 events a second apart; whole answers after 30 s."""
    fake = FakeUpstream(record=False, stream_delay_s=1.0, stream_chunks=30,
                        responder=lambda body: {"role": "assistant", "content": "tick " * 30},
                        faults=[Fault(delay_s=30.0, path=p, times=-1, match=whole_only)
                                for p in PATHS.values()])
    parent = os.getppid()

    async def serve() -> None:
        print(await fake.start(), flush=True)
        while os.getppid() == parent:
            await asyncio.sleep(0.5)

    asyncio.run(serve())


async def streamed(session: aiohttp.ClientSession, url: str, api: str, key: str,
                   first: asyncio.Event, out: list[tuple[str, float]]) -> None:
    try:
        async with session.post(url + PATHS[api], json={**BODIES[api], "stream": True},
                                headers={"Authorization": f"Bearer {key}"}) as resp:
            data = b""
            async for chunk in resp.content.iter_any():
                data += chunk
                first.set()
        last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        outcome = "stream ended with its API's error event" if last.startswith(
            ERROR_EVENT[api]) else "stream complete" if resp.status == 200 else \
            f"status {resp.status}"
    except (aiohttp.ClientError, TimeoutError):
        first.set()
        outcome = "cut"
    out.append((f"{api}: {outcome}", time.monotonic()))


async def whole(session: aiohttp.ClientSession, url: str, api: str, key: str,
                out: list[tuple[str, float]]) -> None:
    try:
        async with session.post(url + PATHS[api], json=BODIES[api],
                                headers={"Authorization": f"Bearer {key}"}) as resp:
            body = await resp.read()
            retry = resp.headers.get("x-should-retry")
        doc = json.loads(body)
        shaped = doc.get("type") == "error" if api == "messages" else "error" in doc
        outcome = f"{resp.status}" + (" in its API's error shape" if shaped else "") + \
            (f", x-should-retry: {retry}" if retry else "")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        outcome = "cut"
    out.append((f"{api}: {outcome}", time.monotonic()))


async def main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="shutdown-"))
    with (tmp / "fake.log").open("wb") as fake_log:  # its answers cut by the proxy, logged there
        fake = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve-fake",
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=fake_log)
    assert fake.stdout is not None
    upstream = (await fake.stdout.readline()).decode().strip()
    port = free_port()
    env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                     "CONTEXT_PROXY_ANTHROPIC_URL": upstream,
                     "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-bench-upstream",
                     "CONTEXT_PROXY_DB": str(tmp / "proxy.db"),
                     "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_HOST": "127.0.0.1",
                     "CONTEXT_PROXY_SHUTDOWN_GRACE_S": str(args.grace_s)})
    store = Store(tmp / "proxy.db")
    key = store.keys.create("acme")[1]
    store.close()
    log = tmp / "proxy.log"
    with log.open("wb") as out_log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve"], cwd=BENCH.parent,
                                env=env, stdout=out_log, stderr=out_log)
    url = f"http://127.0.0.1:{port}"
    results: list[tuple[str, float]] = []
    apis = list(PATHS)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90),
                                         connector=aiohttp.TCPConnector(limit=0)) as s:
            for _ in range(600):
                try:
                    async with s.get(url + "/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            firsts = [asyncio.Event() for _ in range(args.streams)]
            tasks = [asyncio.create_task(streamed(s, url, apis[i % 3], key, firsts[i], results))
                     for i in range(args.streams)]
            tasks += [asyncio.create_task(whole(s, url, apis[i % 3], key, results))
                      for i in range(args.whole)]
            await asyncio.wait_for(asyncio.gather(*(f.wait() for f in firsts)), 60)
            await asyncio.sleep(1.0)  # the whole requests are waiting on the upstream too
            in_flight = sum(not t.done() for t in tasks)
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            await asyncio.to_thread(proc.wait, args.grace_s + 30)
            exited = time.monotonic() - sent
            await asyncio.gather(*tasks)
    finally:
        if proc.poll() is None:
            proc.kill()
        fake.terminate()
    last = max(at for _, at in results) - sent
    by = Counter(outcome for outcome, _ in results)
    print(f"in flight at SIGTERM: {in_flight} ({args.streams} streamed, {args.whole} whole); "
          f"grace {args.grace_s:g} s")
    for outcome, n in sorted(by.items()):
        print(f"  {n:>3} x {outcome}")
    said = [line for line in log.read_text(errors="replace").splitlines() if "shut down" in line]
    print(f"the last answer {last:.2f} s after the signal; the process exited after "
          f"{exited:.2f} s (bound: grace + 1 = {args.grace_s + 1:g} s); its line: "
          f"{said[-1].split(' ', 3)[-1] if said else '-'}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    cut = sum(n for outcome, n in by.items() if outcome.endswith("cut"))
    return 1 if cut or exited > args.grace_s + 1 or len(results) < args.streams + args.whole \
        else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-fake"]:
        serve_fake()
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--whole", type=int, default=10)
    parser.add_argument("--grace-s", type=float, default=8.0)
    raise SystemExit(asyncio.run(main(parser.parse_args())))
