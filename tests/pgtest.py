"""PostgreSQL for the test suite (``pytest --store=postgres``): a fresh schema per test.

Every test then runs against its own schema of one database (``TEST_DATABASE_URL``, by default
the local server's ``test`` database): the proxy's URL names the schema through ``search_path``
in its connection options, so the proxy itself needs no test hook. The schema is dropped after
the test. A schema is much cheaper to make than a database, which keeps the second run short.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from proxy.store.postgres import connect
from proxy.testing.forwarder import Forwarder

SERVER_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


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
    schema = "t_" + secrets.token_hex(6)
    with connect(SERVER_URL) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield url_for(schema)
    finally:
        with connect(SERVER_URL) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


Relay = Forwarder  # the forwarder in front of the PostgreSQL server (proxy.testing)
