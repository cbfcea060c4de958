"""Added latency of context-proxy, a bare aiohttp relay and LiteLLM's proxy over the fake upstream.

Every server runs in its own process on a loopback port: the fake upstream
(``proxy.testing.fake_upstream.FakeUpstream``, ``record=False``), the bare relay
(``bench/bare_relay.py``),
context-proxy (``python -m proxy.cli serve``) and LiteLLM's proxy (``litellm --num_workers 1``,
config pointing at the fake). The load generator is one aiohttp ``ClientSession`` in this process.

One request shape: 50 messages (system, user, assistant with tool calls, tool results), about
4,000 tokens, far below every masking/compaction trigger. For each mode (non-streamed; streamed,
timed to the first body chunk and to the last byte) and each concurrency (1 and 16), the targets
are measured in alternating rounds (direct, bare, context-proxy, LiteLLM, order rotated each
round) so drift hits all alike. Added latency is a difference of percentiles:
``added pXX = pXX(relay) - pXX(direct)``, each percentile taken over its own distribution
(requests are not paired). Run ``python bench/overhead.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
MODEL = "gpt-4o-mini"
WINDOW = 128_000
LITELLM_KEY = "sk-bench-litellm-0123456789abcdef0123456789abcdef"
UPSTREAM_KEY = "sk-bench-upstream-0123456789"

# Targets: (p50 ratio to the bare relay, p99 bound in ms, LiteLLM p50 factor).
MAX_RATIO_BARE = 1.7
MAX_P99_MS = 3.0
MIN_FACTOR_LITELLM = 10.0


# --- the request ------------------------------------------------------------------------------

SYSTEM = """You are Forge, a senior software engineering agent working inside the repository \
'payments-gateway' (Python 3.11, FastAPI, SQLAlchemy 2, PostgreSQL 15, Redis for idempotency \
keys). You act through tools: read_file(path, start, end) returns numbered lines; grep(pattern, \
path) returns matching lines; run_tests(selector) runs pytest and returns its summary; \
apply_patch(diff) applies a unified diff. Rules: read before you edit; keep public function \
signatures stable unless the task says otherwise; every change ships with a test; never touch \
migrations that already ran in production (anything under migrations/versions older than \
2024_06); prefer small, reviewable patches; when a test fails, read the failure before changing \
code again. When you finish, summarise what changed, why, and what you verified. Money is always \
an integer number of minor units (cents) or a Decimal quantized to the currency's exponent; \
floats are a bug. Times are UTC, timezone-aware. Log lines are structured (key=value) and never \
contain card numbers, CVCs or full IBANs."""

TASK = """Refunds for partially captured payments are sometimes rejected with \
'RefundExceedsCapture' even though the refund is smaller than what was captured. Support ticket \
PAY-4127: merchant m_88213 captured 149.99 EUR of a 200.00 EUR authorization, then a refund of \
49.99 EUR failed. Find the cause, fix it without changing the public API of \
payments/refunds.py, add a regression test, and make the whole suite pass."""

FILES = ["payments/refunds.py", "payments/captures.py", "payments/money.py",
         "payments/ledger.py", "tests/test_refunds.py", "payments/idempotency.py"]
FUNCS = ["refundable_amount", "capture_total", "to_minor_units", "post_entry",
         "validate_refund", "reserve_key"]


def _code(i: int) -> str:
    f, fn = FILES[i % len(FILES)], FUNCS[i % len(FUNCS)]
    base = 40 + 7 * i
    lines = [
        f"{base}  def {fn}(payment: Payment, amount: Money | None = None) -> Money:",
        f'{base + 1}      """Return the {fn.replace("_", " ")} for ``payment`` in minor units."""',
        f"{base + 2}      captured = sum((c.amount for c in payment.captures if c.status == "
        f'"succeeded"), Money.zero(payment.currency))',
        f"{base + 3}      refunded = sum((r.amount for r in payment.refunds if r.status in "
        f'("pending", "succeeded")), Money.zero(payment.currency))',
        f"{base + 4}      if amount is not None and amount.currency != payment.currency:",
        f'{base + 5}          raise CurrencyMismatch(f"{{amount.currency}} != '
        '{payment.currency}")',
        f"{base + 6}      remaining = captured - refunded",
        f"{base + 7}      return remaining if amount is None else min(remaining, amount)",
    ]
    return f"# {f} (lines {base}-{base + 7})\n" + "\n".join(lines)


def _grep(i: int) -> str:
    fn = FUNCS[i % len(FUNCS)]
    hits = [f"{FILES[(i + k) % len(FILES)]}:{100 + 13 * k + i}:    total = {fn}(payment"
            f"{', amount' if k % 2 else ''})  # call site {k}" for k in range(4)]
    return f"4 matches for '{fn}'\n" + "\n".join(hits)


def _tests(i: int) -> str:
    failed = max(0, 3 - i // 3)
    return (f"============================= test session starts ==============================\n"
            f"platform linux -- Python 3.11.7, pytest-8.3.2\ncollected {212 + i} items\n\n"
            f"tests/test_refunds.py ....{'F' * failed}.......                      [ 9%]\n"
            f"tests/test_ledger.py ...............................................[ 70%]\n"
            + (f"FAILED tests/test_refunds.py::test_partial_capture_refund[{i}] - "
               f"RefundExceedsCapture: refund 4999 > refundable {4999 - 100 * i}\n"
               if failed else "")
            + f"=========== {failed} failed, {212 + i - failed} passed in {3.1 + i / 10:.2f}s "
            f"===========")


def _call(i: int, k: int) -> dict[str, Any]:
    kind = (i + k) % 3
    if kind == 0:
        name, args = "read_file", {"path": FILES[(i + k) % len(FILES)], "start": 40 + 7 * i,
                                   "end": 48 + 7 * i}
    elif kind == 1:
        name, args = "grep", {"pattern": FUNCS[(i + k) % len(FUNCS)], "path": "payments/"}
    else:
        name, args = "run_tests", {"selector": f"tests/test_refunds.py -k partial_{i}"}
    return {"id": f"call_{i:02d}_{k}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def _result(i: int, call: dict[str, Any]) -> dict[str, Any]:
    name = call["function"]["name"]
    out = {"read_file": _code, "grep": _grep, "run_tests": _tests}[name](i)
    return {"role": "tool", "tool_call_id": call["id"], "content": out}


def _calls(i: int, n: int, thought: str) -> list[dict[str, Any]]:
    calls = [_call(i, k) for k in range(n)]
    return [{"role": "assistant", "content": thought, "tool_calls": calls},
            *(_result(i, c) for c in calls)]


def build_messages() -> list[dict[str, Any]]:
    """50 messages, about 4,000 tokens: an agent session mixing text, tool calls and results."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": TASK}]
    step = 0
    for cycle in range(5):
        msgs += _calls(step, 1, f"Step {step}: checking how {FUNCS[step % 6]} handles partial "
                                "captures before changing anything.")
        step += 1
        msgs += _calls(step, 2, f"Step {step}: comparing the call sites with the ledger entries "
                                "for the same payment.")
        step += 1
        msgs += _calls(step, 1, None if cycle % 2 else f"Step {step}: re-running the refund "
                                                          "tests.")
        step += 1
        msgs.append({"role": "assistant", "content":
                     f"Finding {cycle + 1}: refundable_amount counts captures with status "
                     f"'succeeded' but the partial capture of PAY-4127 is stored as "
                     f"'partially_succeeded', so captured is 0 and every refund exceeds it. "
                     f"The ledger agrees: entry L-{5521 + cycle} has 14999 cents captured. "
                     f"I will {['widen the status filter', 'add a regression test', 'check the idempotency path', 'run the full suite', 'review the log lines'][cycle]} "  # noqa: E501
                     f"next; it does not change the public API."})
        msgs.append({"role": "user", "content":
                     f"OK. {['Also check captures in GBP with exponent 2.', 'Keep the log keys unchanged.', 'Make sure pending refunds still count.', 'Do not touch migrations.', 'Good, continue.'][cycle]}"})  # noqa: E501
    msgs += _calls(step, 1, "Final check of the whole suite.")
    msgs.append({"role": "user", "content": "Great. Summarise the change, the cause and what "
                 "you verified, in five bullet points at most."})
    assert len(msgs) == 50, len(msgs)
    return msgs


TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc, "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)[:1]}}}
    for name, desc, params in [
        ("read_file", "Read numbered lines of a file.",
         {"path": "string", "start": "integer", "end": "integer"}),
        ("grep", "Search the repository.", {"pattern": "string", "path": "string"}),
        ("run_tests", "Run pytest with a selector.", {"selector": "string"}),
        ("apply_patch", "Apply a unified diff.", {"diff": "string"})]]


def request_body(stream: bool) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": build_messages(), "tools": TOOLS,
                            "temperature": 0.2}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def count_tokens() -> int | None:
    try:
        from proxy.context.tokens import TokenCounter

        return int(TokenCounter().count_messages(build_messages(), MODEL, TOOLS))
    except Exception:
        return None


# --- the fake upstream, run in its own process ------------------------------------------------

def serve_fake(chunk_delay_ms: float) -> None:
    """Child process: run the fake upstream on an OS-chosen port; print its base URL."""
    from proxy.testing import fake_upstream as fakeupstream

    try:
        fakeupstream.approx_tokens(build_messages())
    except Exception as e:  # proxy.context.tokens being edited: a fixed-cost stand-in, same for all
        print(f"fake: token counting unavailable ({type(e).__name__}: {e}); using len/4",
              file=sys.stderr)
        fakeupstream.approx_tokens = lambda messages: len(json.dumps(messages)) // 4

    fake = fakeupstream.FakeUpstream(models={MODEL: WINDOW}, record=False,
                                     stream_delay_s=chunk_delay_ms / 1000)
    parent = os.getppid()

    async def run() -> None:
        url = await fake.start()
        gc.collect()
        gc.freeze()  # the baseline should not pause to scan its import-time heap
        print(url, flush=True)
        while os.getppid() == parent:  # exit when the bench is gone
            await asyncio.sleep(1)

    asyncio.run(run())


# --- processes --------------------------------------------------------------------------------

@dataclass
class Target:
    key: str
    label: str
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    log: Path | None = None
    pid: int | None = None  # the relay's process, for its CPU time
    requests: int = 0
    errors: int = 0
    first_error: str = ""

    def check_errors(self) -> None:
        """Sporadic failures are counted and reported; more than 2% disqualify the target."""
        if self.errors > max(5, self.requests // 50):
            self.error = (f"{self.errors} of {self.requests} requests failed, the first: "
                          f"{self.first_error}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "DATABASE_URL")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, cmd: Sequence[str], env: dict[str, str],
              stdout: int | None = None) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the child
        proc = subprocess.Popen(list(cmd), env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=stdout if stdout is not None else log, stderr=log,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def tail(path: Path | None, n: int = 6) -> str:
    if path is None or not path.exists():
        return ""
    lines = path.read_text(errors="replace").strip().splitlines()
    return " | ".join(line.strip() for line in lines[-n:])


async def wait_http(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes],
                    timeout_s: float, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with code {proc.returncode} before it was ready")
        try:
            async with session.get(url, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status == 200:
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"not ready after {timeout_s:.0f} s")


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_ticks() -> int:
    """User + nice + system ticks of the whole machine (``/proc/stat``); 0 when unreadable."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(fields[1]) + int(fields[2]) + int(fields[3])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_ticks(pid: int | None) -> int:
    """User + system CPU ticks of a process (Linux ``/proc``); 0 when unreadable."""
    if pid is None:
        return 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


async def wait_idle(proc: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    """Wait until a server stops using CPU on its own: background work after startup (context-
    proxy imports litellm in a thread) must not be measured as request latency."""
    deadline = time.monotonic() + timeout_s
    last, quiet = cpu_ticks(proc.pid), 0
    while time.monotonic() < deadline and quiet < 3 and proc.poll() is None:
        await asyncio.sleep(0.3)
        now = cpu_ticks(proc.pid)
        quiet = quiet + 1 if now - last <= 1 else 0
        last = now


async def other_load(ours: Sequence[int], seconds: float) -> float:
    """CPUs used, on average over ``seconds``, by processes other than ``ours``."""
    busy0, ours0, wall0 = machine_busy_ticks(), sum(map(cpu_ticks, ours)), time.monotonic()
    await asyncio.sleep(seconds)
    return (machine_busy_ticks() - busy0 - sum(map(cpu_ticks, ours)) + ours0) / CLK_TCK \
        / (time.monotonic() - wall0)


async def wait_quiet(ours: Sequence[int], max_wait_s: float, say: Callable[[str], None]
                     ) -> None:
    """Give other work on the machine (test runs, builds) up to ``max_wait_s`` to finish."""
    deadline = time.monotonic() + max_wait_s
    load = await other_load(ours, 1.0)
    if load > 0.15 and max_wait_s > 0:
        say(f"other processes are using {load:.2f} CPUs; waiting up to {max_wait_s:.0f} s "
            "for a quiet machine")
        while load > 0.15 and time.monotonic() < deadline:
            load = await other_load(ours, 2.0)


async def start_fake(procs: Procs, chunk_delay_ms: float) -> str:
    proc = procs.spawn("fake", [sys.executable, str(Path(__file__).resolve()), "--serve-fake",
                                "--chunk-delay-ms", str(chunk_delay_ms)],
                       child_env({}), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    url = line.decode().strip()
    if not url.startswith("http://"):
        raise RuntimeError(f"fake upstream did not start: {tail(procs.tmp / 'fake.log')}")
    return url


async def start_bare(procs: Procs, session: aiohttp.ClientSession, upstream: str) -> Target:
    t = Target("bare", "bare relay", log=procs.tmp / "bare.log")
    port = free_port()
    proc = procs.spawn("bare", [sys.executable, str(ROOT / "bench" / "bare_relay.py"), "--port",
                                str(port), "--upstream", upstream], child_env({}))
    await wait_http(session, f"http://127.0.0.1:{port}/healthz", proc, 30)
    await wait_idle(proc)
    t.url = f"http://127.0.0.1:{port}/v1/chat/completions"
    t.headers = {"Authorization": "Bearer sk-bench-client"}
    t.pid = proc.pid
    return t


async def start_context_proxy(procs: Procs, session: aiohttp.ClientSession, upstream: str,
                              loaded: bool = False) -> Target:
    """context-proxy on an empty database, or (``loaded``) on one holding 1,000 organizations
    with policy layers and 10,000 keys (``bench/policy_load.py``)."""
    name = "cp-loaded" if loaded else "context-proxy"
    t = Target("cp-loaded" if loaded else "cp", "cp (1k orgs)" if loaded else "context-proxy",
               log=procs.tmp / f"{name}.log")
    port = free_port()
    db = procs.tmp / f"{name}.db"
    env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                     "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                     "CONTEXT_PROXY_DB": str(db),
                     "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_HOST": "127.0.0.1",
                     "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    if loaded:
        sys.path.insert(0, str(ROOT / "bench"))
        from policy_load import populate

        key = await asyncio.to_thread(populate, db)
    else:
        created = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "proxy.cli", "keys", "create", "--org", "bench"],
            env=env, cwd=ROOT, capture_output=True, timeout=120, check=False)
        if created.returncode != 0:
            raise RuntimeError(f"keys create failed: {created.stderr.decode()[-400:]}")
        key = json.loads(created.stdout.decode().strip().splitlines()[-1])["key"]
    proc = procs.spawn(name, [sys.executable, "-m", "proxy.cli", "serve"], env)
    await wait_http(session, f"http://127.0.0.1:{port}/healthz", proc, 60)
    await wait_idle(proc)
    t.url = f"http://127.0.0.1:{port}/v1/chat/completions"
    t.headers = {"Authorization": f"Bearer {key}"}
    t.pid = proc.pid
    return t


async def start_cp_loaded(procs: Procs, session: aiohttp.ClientSession, upstream: str
                          ) -> Target:
    return await start_context_proxy(procs, session, upstream, loaded=True)


Starter = Callable[[Procs, aiohttp.ClientSession, str], Awaitable[Target]]
LOG_NAMES = {"cp": "context-proxy", "cp-loaded": "cp-loaded"}


LITELLM_LOG_CONFIG = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)s %(name)s %(message)s"}},
    "handlers": {"err": {"class": "logging.StreamHandler", "formatter": "plain",
                         "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn": {"handlers": ["err"], "level": "WARNING"},
                "uvicorn.error": {"level": "WARNING"},
                "uvicorn.access": {"handlers": ["err"], "level": "WARNING", "propagate": False}},
}


async def start_litellm(procs: Procs, session: aiohttp.ClientSession, upstream: str) -> Target:
    t = Target("litellm", "LiteLLM proxy", log=procs.tmp / "litellm.log")
    exe = Path(sys.executable).parent / "litellm"
    if not exe.exists():
        raise RuntimeError(f"{exe} not found: install 'litellm[proxy]'")
    cfg = procs.tmp / "litellm.yaml"
    # JSON is YAML: no PyYAML needed here.
    cfg.write_text(json.dumps({
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_base": upstream, "api_key": UPSTREAM_KEY}}],
        "litellm_settings": {"telemetry": False},
        "general_settings": {"master_key": LITELLM_KEY},
    }, indent=1))
    log_cfg = procs.tmp / "litellm-log.json"
    log_cfg.write_text(json.dumps(LITELLM_LOG_CONFIG))
    port = free_port()
    env = child_env({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
                     "LITELLM_LOG": "ERROR", "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
                     "DISABLE_ADMIN_UI": "True"})
    proc = procs.spawn("litellm", [str(exe), "--config", str(cfg), "--host", "127.0.0.1",
                                   "--port", str(port), "--num_workers", "1",
                                   "--log_config", str(log_cfg)], env)
    await wait_http(session, f"http://127.0.0.1:{port}/health/readiness", proc, 150)
    await wait_idle(proc)
    t.url = f"http://127.0.0.1:{port}/v1/chat/completions"
    t.headers = {"Authorization": f"Bearer {LITELLM_KEY}"}
    t.pid = proc.pid
    return t


# --- measuring --------------------------------------------------------------------------------

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


async def batch(session: aiohttp.ClientSession, t: Target, body: bytes, stream: bool,
                conc: int, n: int, max_s: float) -> tuple[list[float], list[float]]:
    firsts: list[float] = []
    lasts: list[float] = []
    left = n
    deadline = time.perf_counter() + max_s

    async def worker() -> None:
        nonlocal left
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
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


def make_plan(quick: bool) -> Plan:
    if quick:
        return Plan(4, {("fast", 1): 60, ("litellm", 1): 10, ("fast", 16): 160,
                        ("litellm", 16): 32}, 6.0, 60)
    return Plan(10, {("fast", 1): 120, ("litellm", 1): 25, ("fast", 16): 400,
                     ("litellm", 16): 80}, 8.0, 200)


MODES = [("non-streamed", False), ("streamed", True)]


@dataclass
class Cell:
    samples: dict[str, list[float]] = field(default_factory=dict)  # target key -> seconds
    # target key -> [relay CPU ticks, fake CPU ticks, requests]
    cpu: dict[str, list[int]] = field(default_factory=dict)

    def add_cpu(self, key: str, relay: int, fake: int, n: int) -> None:
        acc = self.cpu.setdefault(key, [0, 0, 0])
        acc[0] += relay
        acc[1] += fake
        acc[2] += n

    def cpu_us(self, key: str) -> tuple[float | None, float | None]:
        relay, fake, n = self.cpu.get(key, [0, 0, 0])
        if not n:
            return None, None
        return relay * 1e6 / CLK_TCK / n, fake * 1e6 / CLK_TCK / n


async def warm(session: aiohttp.ClientSession, targets: list[Target], bodies: dict[bool, bytes],
               plan: Plan) -> None:
    for t in targets:
        n = plan.warmup if t.key != "litellm" else max(10, plan.warmup // 4)
        try:
            for stream in (False, True):
                await batch(session, t, bodies[stream], stream, 1, n, 60)
                await batch(session, t, bodies[stream], stream, 16, n, 60)
        except Exception as e:
            t.error = f"warm-up failed: {type(e).__name__}: {e} {tail(t.log)}".strip()
        if t.error is not None and "warm-up" not in t.error:
            t.error = f"warm-up: {t.error} {tail(t.log)}".strip()
        t.requests = t.errors = 0  # count failures of the measured requests only
        t.first_error = ""


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
            started = time.perf_counter()
            for r in range(plan.rounds):
                live = [t for t in targets if t.error is None]
                order = live[r % len(live):] + live[:r % len(live)]
                for t in order:
                    kind = "litellm" if t.key == "litellm" else "fast"
                    relay0, fake0 = cpu_ticks(t.pid), cpu_ticks(fake_pid)
                    try:
                        firsts, lasts = await batch(session, t, bodies[stream], stream, conc,
                                                    plan.per_round[(kind, conc)],
                                                    plan.max_batch_s)
                    except Exception as e:
                        t.error = f"failed during {mode} c={conc}: {type(e).__name__}: {e}"
                        continue
                    relay, fake = cpu_ticks(t.pid) - relay0, cpu_ticks(fake_pid) - fake0
                    for name in names:
                        cells[(name, conc)].add_cpu(t.key, relay, fake, len(lasts))
                    if stream:
                        cells[("first chunk", conc)].samples[t.key] += firsts
                        cells[("last byte", conc)].samples[t.key] += lasts
                    else:
                        cells[("non-streamed", conc)].samples[t.key] += lasts
            took = time.perf_counter() - started
            progress(f"  measured {mode:13s} c={conc:<2d} in {took:5.1f} s")
    return cells


# --- report -----------------------------------------------------------------------------------

def fmt(x: float | None, width: int = 8) -> str:
    return f"{'n/a':>{width}}" if x is None or x != x else f"{x:{width}.3f}"


def report(targets: list[Target], cells: dict[tuple[str, int], Cell], out: Callable[[str], None]
           ) -> bool:
    """Print the tables and the targets; return whether every target was met."""
    by_key = {t.key: t for t in targets}
    added: dict[tuple[str, int, str], tuple[float, float]] = {}
    for (metric, conc), cell in cells.items():
        direct = sorted(cell.samples.get("direct", []))
        d50, d99 = pct(direct, 50) * 1e3, pct(direct, 99) * 1e3
        out(f"\n{metric}, concurrency {conc}   (ms; added = relay percentile - direct percentile;"
            f" CPU in us per request)")
        out(f"  {'target':15s} {'n':>5s} {'p50':>8s} {'p99':>8s} {'+p50':>8s} {'+p99':>8s} "
            f"{'+p50/bare':>10s} {'relay CPU':>10s} {'fake CPU':>9s}")
        for t in targets:
            xs = sorted(cell.samples.get(t.key, []))
            if t.key != "direct" and (t.error is not None or not xs):
                out(f"  {t.label:15s} {'n/a':>5s}   ({t.error or 'no samples'})")
                continue
            p50, p99 = pct(xs, 50) * 1e3, pct(xs, 99) * 1e3
            relay_cpu, fake_cpu = cell.cpu_us(t.key)
            cpu = (f"{'-' if relay_cpu is None or t.key == 'direct' else f'{relay_cpu:.0f}':>10s}"
                   f" {'-' if fake_cpu is None else f'{fake_cpu:.0f}':>9s}")
            if t.key == "direct":
                out(f"  {t.label:15s} {len(xs):5d} {fmt(p50)} {fmt(p99)} {'-':>8s} {'-':>8s} "
                    f"{'':>10s} {cpu}")
                continue
            a50, a99 = p50 - d50, p99 - d99
            added[(metric, conc, t.key)] = (a50, a99)
            bare = added.get((metric, conc, "bare"))
            ratio = f"{a50 / bare[0]:9.2f}x" if bare and bare[0] > 0 else f"{'n/a':>10s}"
            out(f"  {t.label:15s} {len(xs):5d} {fmt(p50)} {fmt(p99)} {fmt(a50)} {fmt(a99)} "
                f"{ratio} {cpu}")

    for t in targets:
        if t.errors and t.error is None:
            out(f"\nnote: {t.label}: {t.errors} of {t.requests} measured requests failed and "
                f"were left out; the first: {t.first_error}")
    out("\nTargets (issue 2), context-proxy against the bare relay and LiteLLM's proxy:")
    all_ok = True

    def check(label: str, ok: bool | None, detail: str) -> None:
        nonlocal all_ok
        verdict = "n/a " if ok is None else ("PASS" if ok else "FAIL")
        if ok is False:
            all_ok = False
        out(f"  [{verdict}] {label:52s} {detail}")

    for conc in (1, 16):
        for metric in ("non-streamed", "last byte", "first chunk"):
            cp = added.get((metric, conc, "cp"))
            bare = added.get((metric, conc, "bare"))
            ll = added.get((metric, conc, "litellm"))
            tag = f"c={conc:<2d} {metric}:"
            if cp is None or bare is None:
                check(f"{tag} +p50 <= {MAX_RATIO_BARE}x bare", None, "missing samples")
            elif bare[0] <= 0:
                check(f"{tag} +p50 <= {MAX_RATIO_BARE}x bare", cp[0] <= 0,
                      f"cp {cp[0]:.3f} ms, bare {bare[0]:.3f} ms (bare adds nothing measurable)")
            else:
                r = cp[0] / bare[0]
                check(f"{tag} +p50 <= {MAX_RATIO_BARE}x bare", r <= MAX_RATIO_BARE,
                      f"{r:.2f}x  (cp {cp[0]:.3f} ms, bare {bare[0]:.3f} ms)")
            if conc != 1:
                continue
            if cp is not None:
                check(f"{tag} +p99 <= {MAX_P99_MS:g} ms", cp[1] <= MAX_P99_MS,
                      f"{cp[1]:.3f} ms")
            if ll is None or by_key.get("litellm") is None or cp is None:
                check(f"{tag} +p50 >= {MIN_FACTOR_LITELLM:g}x lower than LiteLLM", None,
                      "LiteLLM n/a" + (f": {by_key['litellm'].error}"
                                       if "litellm" in by_key and by_key["litellm"].error
                                       else ""))
            else:
                factor = ll[0] / cp[0] if cp[0] > 0 else float("inf")
                check(f"{tag} +p50 >= {MIN_FACTOR_LITELLM:g}x lower than LiteLLM",
                      factor >= MIN_FACTOR_LITELLM,
                      f"{factor:.1f}x  (LiteLLM {ll[0]:.3f} ms, cp {cp[0]:.3f} ms)")
    out(f"\nAll targets met: {'yes' if all_ok else 'NO'}")
    return all_ok


# --- main -------------------------------------------------------------------------------------

async def run(args: argparse.Namespace) -> int:
    plan = make_plan(args.quick)
    bodies = {False: request_body(False), True: request_body(True)}
    tokens = count_tokens()

    def say(line: str) -> None:
        print(line, flush=True)

    say(f"context-proxy overhead bench: {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, aiohttp {aiohttp.__version__}"
        f"{', quick' if args.quick else ''}")
    say(f"request: 50 messages + 4 tool schemas, {len(bodies[False]):,} bytes, "
        f"{tokens if tokens is not None else '?'} tokens (o200k_base, proxy.context.tokens); "
        f"the fake streams 4 content chunks + finish + usage + [DONE], "
        f"{args.chunk_delay_ms:g} ms apart")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cp-bench-") as tmpdir:
        procs = Procs(Path(tmpdir))
        connector = aiohttp.TCPConnector(limit=128)
        async with aiohttp.ClientSession(
                connector=connector, auto_decompress=False,
                headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
                timeout=aiohttp.ClientTimeout(total=60)) as session:
            try:
                upstream = await start_fake(procs, args.chunk_delay_ms)
                direct = Target("direct", "direct (fake)", url=upstream + "/chat/completions",
                                headers={"Authorization": f"Bearer {UPSTREAM_KEY}"},
                                log=procs.tmp / "fake.log")
                starters: list[tuple[str, str, Starter]] = [
                    ("bare", "bare relay", start_bare),
                    ("cp", "context-proxy", start_context_proxy)]
                if args.policy_load:
                    starters.append(("cp-loaded", "cp (1k orgs)", start_cp_loaded))
                if not args.no_litellm:
                    starters.append(("litellm", "LiteLLM proxy", start_litellm))
                results = await asyncio.gather(*(fn(procs, session, upstream)
                                                 for _, _, fn in starters),
                                               return_exceptions=True)
                targets = [direct]
                for (key, label, _), res in zip(starters, results, strict=True):
                    if isinstance(res, BaseException):
                        log = procs.tmp / f"{LOG_NAMES.get(key, key)}.log"
                        targets.append(Target(key, label, error=f"did not start: {res} "
                                                                f"{tail(log)}".strip()))
                    else:
                        targets.append(res)
                if args.no_litellm:
                    targets.append(Target("litellm", "LiteLLM proxy",
                                          error="skipped (--no-litellm)"))
                say(f"servers up in {time.perf_counter() - t_start:.1f} s; warming up")
                await warm(session, [t for t in targets if t.error is None], bodies, plan)
                if direct.error is not None:
                    say(f"error: the fake upstream itself fails: {direct.error}")
                    return 2
                gc.collect()
                gc.freeze()
                ours = [os.getpid(), *(p.pid for p in procs.procs)]
                await wait_quiet(ours, args.wait_quiet, say)
                busy0, ours0, wall0 = machine_busy_ticks(), sum(map(cpu_ticks, ours)), \
                    time.monotonic()
                cells = await measure(session, targets, bodies, plan, procs.procs[0].pid, say)
                other = (machine_busy_ticks() - busy0 - sum(map(cpu_ticks, ours)) + ours0) \
                    / CLK_TCK / (time.monotonic() - wall0)
            finally:
                procs.stop()
    ok = report(targets, cells, say)
    say(f"\nother processes on this machine used {other:.2f} CPUs on average while measuring"
        + ("  -- WARNING: the figures are disturbed; rerun on a quiet machine"
           if other > 0.15 else ""))
    say(f"\ntotal run time {time.perf_counter() - t_start:.0f} s")
    return 0 if ok or not args.strict else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and requests (about 20-40 s)")
    p.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
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
