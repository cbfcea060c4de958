"""The proxy's aiohttp application in process, without a server: ``started(settings)`` runs its
start-up (store, upstream sessions, services: ``app[STATE]``) and ``request(...)`` builds the
aiohttp request a handler is called with (aiohttp's own ``make_mocked_request``, its body read
from memory; ``form(...)`` posts a form). For unit tests of the handlers and the modules they
reach. The console's fixtures (``console_app`` with an admin token, ``signed_in``: a session's
cookie header and CSRF token) are registered in conftest.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
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


def request(app: web.Application, method: str, path: str, *, body: Any = None,
            headers: Mapping[str, str] | None = None,
            match_info: Mapping[str, str] | None = None) -> web.Request:
    """A request to ``app`` (bytes, or JSON of ``body``) for calling a handler directly."""
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return make_mocked_request(
        method, path, headers={"Content-Length": str(len(raw)), **(headers or {})}, app=app,
        match_info=dict(match_info or {}), payload=Body(raw),  # type: ignore[arg-type]
        client_max_size=app._client_max_size)


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
