"""Shared fixtures: a running proxy in front of the in-process fake upstream."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import hypothesis  # noqa: F401  (see below)
import openai
import pytest
from needs import REQUIRE_ALL, need  # noqa: F401  (need: imported from here by helpers)
from pgtest import fresh_schema, on_postgres
from store_use import left_out, on_the_suite_store

from proxy.store import Store
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness
from proxy.upstream.client import Upstream

# hypothesis is imported here, at collection, rather than by its plugin at the end of a session
# that ran no property test: that late import parses source while litellm's worker threads may
# still be running, and CPython 3.11's AST state is not thread-safe (SystemError).


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store", choices=("sqlite", "postgres"), default="sqlite",
                     help="the store every proxy the tests start uses (postgres: a fresh "
                          "schema per test on TEST_DATABASE_URL; only the tests that use "
                          "the suite's store run: see tests/store_use.py)")


DESELECTED = pytest.StashKey[int]()  # how many tests the PostgreSQL run left out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that opens a store nowhere in the PostgreSQL run fails the collection; that run
    deselects every test that does not use the suite's store (the same in both runs)."""
    missed = left_out(items)
    if missed:
        raise pytest.UsageError(
            "these tests open a store but the PostgreSQL run would leave them out: request "
            "database_url (or a fixture that does: make_harness, store_target, new_store...) or "
            "mark them own_store (tests/store_use.py):\n  " + "\n  ".join(missed))
    if not on_postgres(config):
        return
    others = [item for item in items if not on_the_suite_store(item)]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = [item for item in items if on_the_suite_store(item)]
    config.stash[DESELECTED] = len(others)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if DESELECTED not in config.stash:
        return None
    return (f"--store=postgres: {config.stash[DESELECTED]} tests that use no store of the "
            "suite's deselected")


@pytest.fixture(autouse=True)
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's user data folder (``XDG_DATA_HOME``) is its own: a command run without
    ``CONTEXT_PROXY_DB`` writes its store there, never into the real user's folder. No test
    inherits ``CONTEXT_PROXY_DATABASE_URL``: only ``database_url`` sets it."""
    folder = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(folder))
    monkeypatch.delenv("CONTEXT_PROXY_DATABASE_URL", raising=False)
    return folder


@pytest.fixture
def database_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                 ) -> Iterator[str | None]:
    """The suite's store for this test: with ``--store=postgres``, a fresh schema, as
    ``CONTEXT_PROXY_DATABASE_URL`` (so a harness and every CLI subprocess use it); None on
    SQLite. A test whose fixtures reach it is in the PostgreSQL run (tests/store_use.py)."""
    if not on_postgres(request.config):
        yield None
        return
    with fresh_schema() as url:
        monkeypatch.setenv("CONTEXT_PROXY_DATABASE_URL", url)
        yield url


@pytest.fixture
def store_target(tmp_path: Path, database_url: str | None) -> Callable[[str], Path | str]:
    """``store_target(name)``: where a test's own ``Store`` lives: ``tmp_path / name`` on
    SQLite, this test's schema on PostgreSQL (one schema: every name is the same store)."""
    return lambda name: database_url or tmp_path / name


@pytest.fixture
def two_stores(store_target: Callable[[str], Path | str]) -> Iterator[tuple[Store, Store]]:
    """Two ``Store`` objects on one target: two processes sharing a store."""
    a, b = Store(store_target("shared.db")), Store(store_target("shared.db"))
    yield a, b
    a.close()
    b.close()


@pytest.fixture
async def upstream_client() -> AsyncIterator[tuple[FakeUpstream, Upstream]]:
    """A started fake upstream and the proxy's ``Upstream`` client of it (no proxy)."""
    fake = FakeUpstream()
    up = Upstream(await fake.start(), None, 5.0)
    yield fake, up
    await up.close()
    await fake.stop()


@pytest.fixture
def new_store(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Callable[[str], Store]]:
    """``new_store(name)``: a store of its own (a new file in ``tmp_path``, or a fresh schema),
    closed at the end of the test."""
    made = itertools.count()
    with ExitStack() as stack:
        def make(name: str) -> Store:
            if on_postgres(pytestconfig):
                target: Path | str = stack.enter_context(fresh_schema())
            else:
                target = tmp_path / f"{next(made)}-{name}"
            store = Store(target)
            stack.callback(store.close)
            return store

        yield make


@pytest.fixture
def make_harness(tmp_path: Path, database_url: str | None) -> Iterator[Callable[..., Harness]]:
    """Start a proxy + fake upstream; stopped at the end of the test."""
    started: list[Harness] = []

    def make(fake: FakeUpstream | None = None, env: dict[str, str] | None = None,
             **settings: Any) -> Harness:
        h = Harness(tmp_path, fake=fake, env=env, **settings).start()
        started.append(h)
        return h

    yield make
    for h in started:
        h.stop()


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness()


@pytest.fixture
def key(harness: Harness) -> str:
    return harness.create_key("acme")


@pytest.fixture
def sdk() -> Iterator[Callable[[Harness, str], openai.OpenAI]]:
    """``sdk(harness, key)``: an openai client of the proxy, closed at the end of the test (an
    unclosed client leaves its sockets to the garbage collector: a ResourceWarning, an error)."""
    made: list[openai.OpenAI] = []

    def make(h: Harness, key: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def client(sdk: Callable[[Harness, str], openai.OpenAI], harness: Harness,
           key: str) -> openai.OpenAI:
    return sdk(harness, key)


@pytest.fixture
async def aclient(harness: Harness, key: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=harness.base_url, api_key=key, max_retries=0) as c:
        yield c


# The admin console's fixtures (start_console, console, browser, page) live with its helpers;
# those of the application in process (make_app, fake_upstream, console_app, signed_in) with
# theirs.
from console_support import browser, console, page, start_console  # noqa: E402, F401
from inproc import console_app, fake_upstream, make_app, signed_in  # noqa: E402, F401
