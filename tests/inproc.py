"""The proxy's aiohttp application in process, without a server: ``started(settings)`` runs its
start-up (store, upstream sessions, services: ``app[STATE]``) and ``request(...)`` builds the
aiohttp request a handler is called with (aiohttp's own ``make_mocked_request``, its body read
from memory; ``form(...)`` posts a form). For unit tests of the handlers and the modules they
reach. Its fixtures, registered in conftest.py: ``make_app(**env)`` (the application in front
of ``fake_upstream``, the in-process fake), ``console_app`` (with an admin token) and
``signed_in`` (a console session's cookie header and CSRF token)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.app import create_app
from proxy.console.session import COOKIE
from proxy.console.web import SESSIONS
from proxy.policy.platform import PlatformConfig
from proxy.settings import Settings, load_settings
from proxy.testing.fake_upstream import FakeUpstream

UPSTREAM_KEY = "sk-upstream-inproc-0123456789"
ADMIN_TOKEN = "console-admin-token-0123456789abcdef"


def settings_for(tmp_path: Path, upstream_url: str, database_url: str | None = None,
                 env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings of a proxy on ``tmp_path``'s store (or ``database_url``) in front of
    ``upstream_url``: the embedded platform defaults, no folder to watch."""
    base = {"CONTEXT_PROXY_DB": str(tmp_path / "proxy.db"),
            "CONTEXT_PROXY_DATABASE_URL": database_url or "",
            "CONTEXT_PROXY_UPSTREAM_URL": upstream_url,
            "CONTEXT_PROXY_ANTHROPIC_URL": upstream_url,
            "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY, **(env or {})}
    return load_settings(base, **{"platform": PlatformConfig(), "policies_dir": None,
                                  **overrides})


@asynccontextmanager
async def started(settings: Settings,
                  prepare: Callable[[web.Application], None] | None = None
                  ) -> AsyncIterator[web.Application]:
    """The application (``prepare``d, as ``serve`` adds to it) with its start-up run, and its
    shutdown and clean-up after."""
    app = create_app(settings)
    if prepare is not None:
        prepare(app)
    app.on_startup.freeze()  # as aiohttp's runner does: start-up first, then the app frozen
    await app.startup()
    app.freeze()
    try:
        yield app
    finally:
        await app.shutdown()
        await app.cleanup()


class Body:
    """A request body held in memory, read the way aiohttp reads a payload."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def set_read_chunk_size(self, size: int) -> None:
        pass

    async def readany(self) -> bytes:
        data, self._data = self._data, b""
        return data

    async def read(self, n: int = -1) -> bytes:
        return await self.readany()


class Sent:
    """Where a handler's streamed answer is written (the payload writer aiohttp's server would
    give it): ``body`` is every byte of the body so far, ``ended`` whether it was finished."""

    def __init__(self) -> None:
        self.body = b""
        self.ended = False
        self.length: int | None = None
        self.output_size = 0
        self.buffer_size = 0

    async def write_headers(self, status_line: str, headers: Any) -> None:
        self.status_line = status_line

    def send_headers(self) -> None:
        pass

    def enable_chunking(self) -> None:
        pass

    def enable_compression(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def write(self, data: bytes) -> None:
        self.body += bytes(data)
        self.output_size += len(data)

    async def write_eof(self, data: bytes = b"") -> None:
        await self.write(data)
        self.ended = True

    async def drain(self) -> None:
        pass


def request(app: web.Application, method: str, path: str, *, body: Any = None,
            headers: Mapping[str, str] | None = None,
            match_info: Mapping[str, str] | None = None, sent: Sent | None = None
            ) -> web.Request:
    """A request to ``app`` (bytes, or JSON of ``body``) for calling a handler directly; a
    streamed answer's body goes to ``sent``."""
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    extra: dict[str, Any] = {} if sent is None else {"writer": sent}
    return make_mocked_request(
        method, path, headers={"Content-Length": str(len(raw)), **(headers or {})}, app=app,
        match_info=dict(match_info or {}), payload=Body(raw),  # type: ignore[arg-type]
        client_max_size=app._client_max_size, **extra)


async def routed(app: web.Application, method: str, path: str, **kwargs: Any) -> web.Request:
    """``request(...)`` matched by the app's own router, as the server would match it (its
    route, its name, its ``match_info``)."""
    req = request(app, method, path, **kwargs)
    info = await app.router.resolve(req)
    info.add_app(app)
    req._match_info = info  # where make_mocked_request puts a match of its own making
    return req


def form(app: web.Application, path: str, fields: Mapping[str, Any],
         headers: Mapping[str, str] | None = None,
         match_info: Mapping[str, str] | None = None) -> web.Request:
    """A request posting ``fields`` as an HTML form does."""
    return request(app, "POST", path, body=urlencode(fields).encode(),
                   headers={"Content-Type": "application/x-www-form-urlencoded",
                            **(headers or {})}, match_info=match_info)


@pytest.fixture
async def console_app(tmp_path: Path, database_url: str | None
                      ) -> AsyncIterator[web.Application]:
    """The application with its console (an admin token), started in process."""
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", database_url,
                            env={"CONTEXT_PROXY_ADMIN_TOKEN": ADMIN_TOKEN})
    async with started(settings) as app:
        yield app


@pytest.fixture
def signed_in(console_app: web.Application) -> tuple[dict[str, str], str]:
    """(headers carrying a fresh console session's cookie, that session's CSRF token)."""
    sessions = console_app[SESSIONS]
    cookie, session = sessions.issue()
    return {"Cookie": f"{COOKIE}={cookie}"}, sessions.csrf_token(session)


@pytest.fixture
async def fake_upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream(models={"m-32k": 32_768})
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def make_app(tmp_path: Path, database_url: str | None, fake_upstream: FakeUpstream
                   ) -> AsyncIterator[Callable[..., Awaitable[web.Application]]]:
    """``await make_app(**env)``: the application in front of ``fake_upstream``, started in
    process (``env``: more ``CONTEXT_PROXY_*`` variables; ``platform``: a platform config of
    its own), cleaned up after the test."""
    async with AsyncExitStack() as stack:
        async def make(platform: PlatformConfig | None = None, **env: str) -> web.Application:
            extra = {} if platform is None else {"platform": platform}
            settings = settings_for(tmp_path, fake_upstream.base_url, database_url, env=env,
                                    **extra)
            return await stack.enter_async_context(started(settings))

        yield make
