"""Run the fake upstream and the proxy on loopback ports the OS picks, in a background thread.

The demo, the tests and the benchmarks all use this: a real server on a real socket, so the real
``openai`` SDK (sync or async, on any thread) can talk to it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from proxy.app import create_app
from proxy.http.encoding import SERVER_OPTIONS
from proxy.settings import Settings, load_settings
from proxy.state import STATE, ProxyState
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.scrape import metric

T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    """One answer of the proxy as its client saw it start: the request's method and path, the
    status and the headers (``X-Context-*`` included), recorded when the answer was prepared;
    ``error`` is the body of a whole (not streamed) answer of status >= 400."""

    method: str
    path: str
    status: int
    headers: dict[str, str]
    error: str | None = None


class Harness:
    """``with Harness(tmp_path) as h:`` gives ``h.base_url`` (the proxy's /v1) and ``h.fake``."""

    def __init__(self, db_dir: Path, fake: FakeUpstream | None = None,
                 env: dict[str, str] | None = None, port: int = 0, **settings: Any) -> None:
        self.fake = fake or FakeUpstream()
        self._port = port  # 0: the OS picks
        # The store: a file in ``db_dir``, or the PostgreSQL database this process is pointed at
        # (the test suite's ``--store=postgres``); ``env`` may override either.
        self._env = {"CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-secret-0123456789",
                     "CONTEXT_PROXY_DB": str(db_dir / "proxy.db"),
                     "CONTEXT_PROXY_DATABASE_URL": os.environ.get("CONTEXT_PROXY_DATABASE_URL", ""),
                     **(env or {})}
        self._settings_overrides = settings
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="harness-loop")
        self._runner: web.AppRunner | None = None
        self.settings: Settings | None = None
        self.base_url = ""
        self.answers: list[Answer] = []  # every answer the proxy started, in order

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        upstream_url = await self.fake.start()
        env = {"CONTEXT_PROXY_UPSTREAM_URL": upstream_url,
               "CONTEXT_PROXY_ANTHROPIC_URL": upstream_url,
               "CONTEXT_PROXY_ANTHROPIC_API_KEY": "sk-ant-upstream-secret-0123456789", **self._env}
        settings = load_settings(env, **self._settings_overrides)
        self.settings = replace(settings, port=0)
        app = create_app(self.settings)
        app.on_response_prepare.append(self._answered)
        self._runner = web.AppRunner(app, access_log=None, **SERVER_OPTIONS)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    async def _answered(self, request: web.Request, response: web.StreamResponse) -> None:
        body = getattr(response, "body", None)
        error = body.decode("utf-8", "replace") if response.status >= 400 and isinstance(
            body, bytes) else None
        self.answers.append(Answer(request.method, request.path, response.status,
                                   dict(response.headers), error))

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self.fake.stop()

    @property
    def state(self) -> ProxyState:
        assert self._runner is not None
        return self._runner.app[STATE]

    @property
    def upstream_key(self) -> str:
        return self._env["CONTEXT_PROXY_UPSTREAM_API_KEY"]

    def settle(self, timeout: float = 30) -> None:
        """Wait until no request is being handled and no summary is being prepared: an answer
        reaches its client before the proxy books its usage, so a reader of figures waits for
        the bookkeeping to end."""
        async def idle() -> None:
            while self.state.context.preparer.busy or any(
                    s.value for m in self.state.metrics.in_flight.collect() for s in m.samples):
                await asyncio.sleep(0.005)

        self.call(asyncio.wait_for(idle(), timeout), timeout + 1)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the ``/metrics`` samples named ``name`` with these ``labels``, read once
        the proxy is idle (``settle``)."""
        self.settle()
        return metric(self.state.metrics.render().decode(), name, **labels)

    def create_key(self, org: str = "acme", user: str | None = None) -> str:
        return self.state.store.keys.create(org, user)[1]

    def start(self) -> Harness:
        self._thread.start()
        self.call(self._start())
        return self

    def stop(self) -> None:
        """Stop the proxy and the fake upstream (again: nothing to do, so a test may restart)."""
        if self.loop.is_closed():
            return
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self) -> Harness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
