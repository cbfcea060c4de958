"""PostgreSQL for the test suite (``pytest --store=postgres``): a fresh schema per test.

Every test then runs against its own schema of one database (``TEST_DATABASE_URL``, by default
the local server's ``test`` database): the proxy's URL names the schema through ``search_path``
in its connection options, so the proxy itself needs no test hook. The schema is dropped after
the test. A schema is much cheaper to make than a database, which keeps the second run short.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from needs import need

from proxy.store.postgres import connect, public_url

SERVER_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
INSTALL_POSTGRES = ("run a PostgreSQL server there (Debian: apt-get install -y postgresql; trust "
                    "auth for postgres, a database named test) or point TEST_DATABASE_URL at one")


@functools.cache
def _unreachable() -> str | None:
    """Why the test server cannot be used (None: it can), asked once per run."""
    try:
        with connect(SERVER_URL) as conn:
            conn.execute("SELECT 1")
    except Exception as e:  # what psycopg raises for a server that is not there varies
        return " ".join(str(e).split())[:200] or type(e).__name__
    return None


def require_postgres() -> None:
    """Skip (or, in CI, fail) the test when the PostgreSQL server is not there, saying so."""
    reason = _unreachable()
    if reason is not None:
        need(f"PostgreSQL at {public_url(SERVER_URL)} (TEST_DATABASE_URL; {reason})",
             INSTALL_POSTGRES)


def via_port(url: str, port: int) -> str:
    """``url`` with the server's port replaced (to go through a ``Relay``)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
    return urlunsplit(parts._replace(netloc=f"{netloc}:{port}"))


def url_for(schema: str, base: str = SERVER_URL) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


def on_postgres(config: pytest.Config) -> bool:
    """Whether this run is the suite's PostgreSQL run (``--store=postgres``)."""
    return bool(config.getoption("--store") == "postgres")


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new empty schema; yields the proxy's URL for it. Dropped (with what is in it) after."""
    require_postgres()
    schema = "t_" + secrets.token_hex(6)
    with connect(SERVER_URL) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield url_for(schema)
    finally:
        with connect(SERVER_URL) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


class Relay:
    """A TCP relay on a loopback port the OS picks, in front of the PostgreSQL server: ``down()``
    cuts every relayed connection and refuses new ones (the database has gone away), ``up()``
    serves again on the same port."""

    def __init__(self, target_port: int = 5432) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._open.add(up_writer)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.transport.abort()
                self._open.discard(w)

    async def _up(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _down(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()
        await self._server.wait_closed()

    def start(self) -> Relay:
        self._thread.start()
        self._call(self._up())
        return self

    def up(self) -> None:
        self._call(self._up())

    def down(self) -> None:
        self._call(self._down())

    async def _finish(self) -> None:
        if self._server is not None and self._server.is_serving():
            await self._down()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        self._call(self._finish())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
