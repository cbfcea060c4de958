"""Added latency and CPU of context-proxy against a bare aiohttp relay, over the fake upstream.

Every server runs in its own process on a loopback port: the fake upstream
(``proxy.testing.fake_upstream.FakeUpstream``, ``record=False``), the bare relay
(``bench/bare_relay.py``), context-proxy (``python -m proxy.cli serve``) and LiteLLM's proxy
(``litellm --num_workers 1``, config pointing at the fake). The load generator is one aiohttp
``ClientSession`` in this process.

Scenarios: the fixed 50-message request (about 4,200 tokens) non-streamed and streamed (first
chunk, last byte) at concurrency 1 and 16; then a large agent conversation (about 2 MB, 1,600
messages, one turn more per request) at concurrency 1; then requests that each differ from the
one before (``_workload.SCENARIOS``) at concurrency 1 and 16. Targets are ratios to the bare relay
measured in the same run (``_report.py``). Run ``python bench/overhead.py --help`` for the
options; ``bench/README.md`` has more. The modules:

- ``_workload.py``: the request bodies;
- ``_procs.py``: process control: children, waiting for health and idleness, CPU ticks from
  /proc;
- ``_servers.py``: starting the fake upstream, the bare relay, context-proxy and LiteLLM;
- ``_load.py``: the request loop, batches, alternating rounds, percentiles;
- ``_report.py``: the tables and the PASS/FAIL targets.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
for _path in (str(BENCH.parent), str(BENCH)):  # the proxy package, and this file's siblings
    if _path not in sys.path:
        sys.path.insert(0, _path)

import aiohttp  # noqa: E402
from _load import (  # noqa: E402
    LargeRun,
    large_targets,
    make_plan,
    measure,
    measure_large,
    measure_scenarios,
    warm,
)
from _overhead_header import HeaderCheck, header_check, report_header  # noqa: E402
from _procs import LoadMeter, Procs, Target, wait_quiet  # noqa: E402
from _report import report  # noqa: E402
from _servers import direct_target, serve_fake, start_all, start_fake  # noqa: E402
from _workload import (  # noqa: E402
    MODEL,
    SCENARIOS,
    TOOLS,
    Growing,
    build_messages,
    count_tokens,
    small_body,
)


async def run(args: argparse.Namespace) -> int:
    plan = make_plan(args.quick)
    bodies = {False: small_body(False), True: small_body(True)}
    tokens = count_tokens(build_messages(), TOOLS, MODEL)
    grow = None if args.no_large or args.only_scenarios or args.only_header else \
        Growing(plan.rounds * plan.large_per_round, plan.large_warmup)
    scenarios = {} if args.no_scenarios or args.only_header else SCENARIOS

    def say(line: str) -> None:
        print(line, flush=True)

    say(f"context-proxy overhead bench: {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, aiohttp {aiohttp.__version__}"
        f"{', quick' if args.quick else ''}")
    say(f"small request: 50 messages + 4 tool schemas, {len(bodies[False]):,} bytes, "
        f"{tokens if tokens is not None else '?'} tokens (o200k_base, the proxy's counter); "
        f"the fake streams 4 content chunks + finish + usage + [DONE], "
        f"{args.chunk_delay_ms:g} ms apart")
    if grow is not None:
        say(f"large request: {grow.count(0):,} messages, {len(grow.body(0)):,} bytes, "
            f"{grow.tokens(0) or '?'} tokens, model {grow.model} (proxy.testing.agent, "
            f"seed {grow.spec.seed}), growing by one turn per request")
    t_start = time.perf_counter()
    large: LargeRun | None = None
    said: HeaderCheck | None = None
    with tempfile.TemporaryDirectory(prefix="cp-bench-") as tmpdir:
        procs = Procs(Path(tmpdir))
        connector = aiohttp.TCPConnector(limit=128)
        async with aiohttp.ClientSession(
                connector=connector, auto_decompress=False,
                headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
                timeout=aiohttp.ClientTimeout(total=120)) as session:
            try:
                upstream = await start_fake(procs, args.chunk_delay_ms)
                direct = direct_target(procs, upstream)
                keys = ["bare", "cp"] + (["cp-loaded"] if args.policy_load else []) \
                    + ([] if args.no_litellm else ["litellm"]) \
                    + ([] if args.no_awecompress else ["awe"])
                targets = [direct, *await start_all(procs, session, upstream, keys)]
                if args.no_litellm:
                    targets.append(Target("litellm", "LiteLLM proxy",
                                          error="skipped (--no-litellm)"))
                if args.no_awecompress:
                    targets.append(Target("awe", "awecompress",
                                          error="skipped (--no-awecompress)"))
                say(f"servers up in {time.perf_counter() - t_start:.1f} s; warming up")
                await warm(session, [t for t in targets if t.error is None], bodies, plan)
                if direct.error is not None:
                    say(f"error: the fake upstream itself fails: {direct.error}")
                    return 2
                gc.collect()
                gc.freeze()
                ours = [os.getpid(), *(p.pid for p in procs.procs)]
                await wait_quiet(ours, args.wait_quiet, say)
                meter = LoadMeter(ours)
                fake_pid = procs.procs[0].pid
                cells = {} if args.only_scenarios or args.only_header else \
                    await measure(session, targets, bodies, plan, fake_pid, say)
                cells |= await measure_scenarios(session, targets, scenarios, plan, fake_pid,
                                                 say)
                if grow is not None:
                    large = await measure_large(session, large_targets(targets), grow, plan,
                                                fake_pid, say)
                cp, bare = (next(t for t in targets if t.key == k) for k in ("cp", "bare"))
                if cp.error is None and bare.error is None:
                    said = await header_check(session, direct, bare, cp, bodies[False],
                                              100 if args.quick else 400)
                other = meter.cpus()
            finally:
                procs.stop()
    ok = report(targets, cells, say, large, {k: title for k, (title, _) in scenarios.items()})
    if said is not None:
        report_header(said, say)
    say(f"\nother processes on this machine used {other:.2f} CPUs on average while measuring"
        + ("  -- WARNING: the figures are disturbed; rerun on a quiet machine"
           if other > 0.15 else ""))
    say(f"\ntotal run time {time.perf_counter() - t_start:.0f} s")
    return 0 if ok or not args.strict else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="fewer rounds and requests (10-25 s instead of 1.5 min, "
                        "without LiteLLM)")
    p.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    p.add_argument("--no-large", action="store_true",
                   help="skip the large (2 MB, 1,600-message) conversation")
    p.add_argument("--no-awecompress", action="store_true", help="skip awecompress")
    p.add_argument("--no-scenarios", action="store_true",
                   help="skip the scenarios whose every request is new (last message changes, "
                        "growing conversation, 16 conversations)")
    p.add_argument("--only-scenarios", action="store_true",
                   help="measure only those scenarios (implies --no-large)")
    p.add_argument("--only-header", action="store_true",
                   help="check only X-Context-Overhead-Ms against the added latency")
    p.add_argument("--policy-load", action="store_true",
                   help="also measure context-proxy on a database of 1,000 organizations and "
                        "10,000 keys (row 'cp (1k orgs)')")
    p.add_argument("--chunk-delay-ms", type=float, default=0.0,
                   help="pause between the fake's SSE events (default 0)")
    p.add_argument("--wait-quiet", type=float, default=30.0, metavar="S",
                   help="before measuring, wait up to S seconds for other processes to stop "
                        "using CPU (default 30)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_fake:
        serve_fake(args.chunk_delay_ms)
        return 0
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
