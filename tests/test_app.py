"""The application (``proxy.app.create_app``) built and started in process, without a server:
the route order (the ``/v1/*`` catch-all last, the WebSocket upgrade before the Responses
route), the admin API and console only with a token, the resources start-up makes (stored
policy layers loaded, earlier processes' leases released on SQLite) and clean-up closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from inproc import settings_for, started

from proxy.app import create_app
from proxy.policy.rows import write_layer
from proxy.state import STATE
from proxy.store import Store, leases
from proxy.testing.fake_upstream import FakeUpstream


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    fake = FakeUpstream()
    yield await fake.start()
    await fake.stop()


def routes(app: object) -> list[tuple[str, str]]:
    return [(r.method, r.resource.canonical) for r in app.router.routes()  # type: ignore
            if r.resource is not None]


@pytest.mark.own_store
def test_the_catch_all_relay_comes_last_and_the_upgrade_before_responses(tmp_path: Path
                                                                         ) -> None:
    app = create_app(settings_for(tmp_path, "http://127.0.0.1:9/v1"))
    order = routes(app)
    assert order[-1] == ("*", "/v1/{tail}")
    assert order.index(("GET", "/v1/responses")) < order.index(("POST", "/v1/responses"))
    assert ("POST", "/v1/chat/completions") in order and ("GET", "/healthz") in order
    assert not [p for _, p in order if p.startswith("/admin")]


@pytest.mark.own_store
def test_the_admin_api_and_console_exist_only_with_a_token(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path, "http://127.0.0.1:9/v1",
                                  env={"CONTEXT_PROXY_ADMIN_TOKEN": "t" * 32}))
    paths = {p for _, p in routes(app)}
    assert "/admin/orgs" in paths and any(p.startswith("/admin/ui") for p in paths)


async def test_start_up_loads_the_stored_layers_and_releases_old_leases(
        tmp_path: Path, upstream: str, database_url: str | None) -> None:
    settings = settings_for(tmp_path, upstream, database_url)
    before = Store(settings.store_target)
    before.atomic(write_layer, "acme", None, {"rerank.keep": 2})
    before.atomic(leases.claim, "compaction c1 h1", 300, "an-earlier-process")
    before.close()
    async with started(settings) as app:
        state = app[STATE]
        assert state.policies.resolve("acme").rerank.keep == 2
        # On SQLite the starting process is the store's only one; on PostgreSQL other
        # replicas may hold leases that must stay.
        assert leases.held(state.store, "compaction c1 h1") == (database_url is not None)
        store = state.store
    with pytest.raises(Exception):  # cleaned up: the store is closed  # noqa: B017
        store.read("SELECT 1")
