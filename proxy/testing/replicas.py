"""Several replicas of the proxy as separate processes on one PostgreSQL database, in front of
one in-process fake upstream: what the scale-out tests and ``bench/replicas.py`` drive.

Each replica is ``python -m proxy.cli serve --port 0``; its port is read off its start-up line
("listening on http://127.0.0.1:N"). ``next_url()`` hands out the live replicas' base URLs in
turn (a round-robin load balancer); ``kill(i)`` ends one with SIGKILL, as a lost machine would.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from proxy.store import Store
from proxy.testing.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
START_GUARD_S = 60  # not a timing check: a replica that never starts fails instead of hanging
UPSTREAM_KEY = "sk-upstream-replicas-0123456789"
_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


class Replicas:
    """``with Replicas(tmp, url, 3, policies=...) as r:`` starts the fake upstream and the
    replicas; ``policies`` is the text of the policies folder's ``platform.yaml``.
    ``upstream``: the base URL of an upstream already running (a fake in a process of its
    own, say), in place of the in-process fake."""

    def __init__(self, tmp: Path, database_url: str, count: int = 3,
                 fake: FakeUpstream | None = None, policies: str = "",
                 env: dict[str, str] | None = None, upstream: str | None = None) -> None:
        self.tmp = tmp
        self.database_url = database_url
        self.count = count
        self.upstream = upstream
        self.fake = fake or FakeUpstream()
        self.env = env or {}
        (tmp / "policies").mkdir(exist_ok=True)
        (tmp / "policies" / "platform.yaml").write_text(policies or "defaults: {}\n")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.live: list[int] = []
        self._turn = 0
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="replicas-fake")
        self.store: Store | None = None

    def log_path(self, i: int) -> Path:
        return self.tmp / f"replica-{i}.log"

    def log(self, i: int) -> str:
        return self.log_path(i).read_text()

    def _spawn(self, i: int, upstream: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "CONTEXT_PROXY_DATABASE_URL": self.database_url,
               "CONTEXT_PROXY_DB": str(self.tmp / "unused.db"),
               "CONTEXT_PROXY_POLICIES": str(self.tmp / "policies"),
               "CONTEXT_PROXY_UPSTREAM_URL": upstream,
               "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY, **self.env}
        with self.log_path(i).open("w") as out:
            return subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--port", "0"],
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out)

    def _port(self, i: int) -> int:
        deadline = time.monotonic() + START_GUARD_S
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log(i))
            if found:
                return int(found.group(1))
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"replica {i} exited: {self.log(i)[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"replica {i} printed no start-up line")

    def start(self) -> Replicas:
        self._thread.start()
        upstream = self.upstream or asyncio.run_coroutine_threadsafe(
            self.fake.start(), self.loop).result(10)
        # The schema first, from one process: replicas then start on a migrated store.
        self.store = Store(self.database_url)
        self.procs = [self._spawn(i, upstream) for i in range(self.count)]
        self.ports = [self._port(i) for i in range(self.count)]
        self.live = list(range(self.count))
        return self

    def url(self, i: int) -> str:
        """Replica ``i``'s base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.ports[i]}/v1"

    def next_index(self) -> int:
        """The next live replica, in turn."""
        with self._lock:
            i = self.live[self._turn % len(self.live)]
            self._turn += 1
            return i

    def next_url(self) -> str:
        return self.url(self.next_index())

    def create_key(self, org: str = "acme", user: str | None = None) -> str:
        assert self.store is not None
        return self.store.keys.create(org, user)[1]

    def kill(self, i: int) -> None:
        """SIGKILL replica ``i``: no shutdown, no release of what it held."""
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait(START_GUARD_S)
        with self._lock:
            self.live.remove(i)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(START_GUARD_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.store is not None:
            self.store.close()
        if self.upstream is None:
            asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def __enter__(self) -> Replicas:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
