"""PostgreSQL for the test suite (``pytest --store=postgres``): a fresh schema per test.

Every test then runs against its own schema of one database (``TEST_DATABASE_URL``, by default
the local server's ``test`` database): the proxy's URL names the schema through ``search_path``
in its connection options, so the proxy itself needs no test hook. The schema is dropped after
the test. A schema is much cheaper to make than a database, which keeps the second run short.
"""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from needs import need

from proxy.store.postgres import connect, public_url
from proxy.testing.forwarder import Forwarder

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
        _drop(schema)


def _drop(schema: str, tries: int = 5) -> None:
    """Drop ``schema``. A proxy of the test may still be closing its pool, its last statement
    holding a lock the drop needs: PostgreSQL then breaks the deadlock by failing one side, and
    the drop is tried again."""
    for attempt in range(tries):
        try:
            with connect(SERVER_URL) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == tries - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


Relay = Forwarder  # the forwarder in front of the PostgreSQL server (proxy.testing)
