"""Process control for ``overhead.py``: children, readiness, idleness, CPU ticks from /proc.

``Procs`` spawns each server in its own process group (so ``stop`` ends it and its children,
and nothing else); ``wait_http`` waits for a health endpoint, ``wait_idle`` until a process
stops using CPU on its own, ``wait_quiet`` for the rest of the machine. The servers themselves
are started by ``_servers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Target:
    """Where to send requests, and what went wrong there (``error`` disqualifies it)."""

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


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "DATABASE_URL")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    env.update(extra)
    return env


class Procs:
    """The children of one run; ``stop`` ends each of them (by process group), and only them."""

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


# --- CPU time from /proc ----------------------------------------------------------------------

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


def cpu_ns(pid: int | None) -> int:
    """CPU time of a process in nanoseconds: the sum of its threads' ``schedstat`` (Linux,
    nanosecond resolution, where 100 ticks a second are too coarse for a few hundred requests),
    else its ticks from ``/proc/<pid>/stat``; 0 when unreadable."""
    if pid is None:
        return 0
    try:
        return sum(int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                   for tid in os.listdir(f"/proc/{pid}/task"))
    except (OSError, IndexError, ValueError):
        return cpu_ticks(pid) * 1_000_000_000 // CLK_TCK


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


class LoadMeter:
    """CPUs used by processes other than ``ours`` between construction and ``cpus()``."""

    def __init__(self, ours: Sequence[int]) -> None:
        self.ours = list(ours)
        self.busy0, self.ours0 = machine_busy_ticks(), sum(map(cpu_ticks, self.ours))
        self.wall0 = time.monotonic()

    def cpus(self) -> float:
        other = machine_busy_ticks() - self.busy0 - sum(map(cpu_ticks, self.ours)) + self.ours0
        return max(0.0, other / CLK_TCK / max(1e-6, time.monotonic() - self.wall0))


async def wait_quiet(ours: Sequence[int], max_wait_s: float, say: Callable[[str], None]
                     ) -> None:
    """Give other work on the machine (test runs, builds) up to ``max_wait_s`` to finish."""
    deadline = time.monotonic() + max_wait_s
    meter = LoadMeter(ours)
    await asyncio.sleep(1.0)
    load = meter.cpus()
    if load > 0.15 and max_wait_s > 0:
        say(f"other processes are using {load:.2f} CPUs; waiting up to {max_wait_s:.0f} s "
            "for a quiet machine")
        while load > 0.15 and time.monotonic() < deadline:
            meter = LoadMeter(ours)
            await asyncio.sleep(2.0)
            load = meter.cpus()
