"""The application's typed state (``proxy.state``): after start-up ``app[STATE]`` holds every
resource a handler reaches, of its type, frozen; ``app[SETTINGS]`` the settings it was made
with."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from inproc import settings_for, started

from proxy.apis import APIS
from proxy.auth import Authenticator, Principal
from proxy.context.checked import CheckedLists
from proxy.context.managed import ContextService
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.state import SETTINGS, STATE, ProxyState, upstream_for
from proxy.store import Store
from proxy.testing.fake_upstream import FakeUpstream
from proxy.upstream.client import Upstream


@pytest.mark.own_store
async def test_every_resource_is_in_the_state_of_its_type(tmp_path: Path) -> None:
    fake = FakeUpstream()
    settings = settings_for(tmp_path, await fake.start())
    try:
        async with started(settings) as app:
            state = app[STATE]
            assert isinstance(state, ProxyState) and app[SETTINGS] is settings
            assert state.settings is settings
            kinds = {"store": Store, "auth": Authenticator, "upstream": Upstream,
                     "metrics": Metrics, "policies": PolicyService, "context": ContextService,
                     "checked": CheckedLists, "anthropic": Upstream, "trigger_refused": set}
            assert {f.name for f in dataclasses.fields(ProxyState)} == {"settings", *kinds}
            for name, kind in kinds.items():
                assert isinstance(getattr(state, name), kind), name
            assert state.upstream is not state.anthropic
            with pytest.raises(dataclasses.FrozenInstanceError):
                state.store = state.store  # type: ignore[misc]
    finally:
        await fake.stop()


@pytest.mark.parametrize("mode", ["proxy_keys", "passthrough"])
def test_each_apis_upstream_and_key_are_chosen_in_one_place(mode: str) -> None:
    """Every route (managed, relayed as it came, passed through, summaries) asks the state:
    an Anthropic API goes to the Anthropic-compatible upstream and, under proxy keys, carries
    the platform's Anthropic key; every other API the OpenAI-compatible one, the caller's key."""
    openai_up, anthropic_up = object(), object()
    state = ProxyState(
        settings=SimpleNamespace(anthropic_api_key="sk-ant"),  # type: ignore[arg-type]
        store=None, auth=SimpleNamespace(mode=mode), upstream=openai_up,  # type: ignore[arg-type]
        metrics=None, policies=None, context=None, checked=None,  # type: ignore[arg-type]
        anthropic=anthropic_up)  # type: ignore[arg-type]
    who = Principal("acme", None, "key_1", "sk-caller")
    assert {name: state.upstream_of(api) for name, api in APIS.items()} == {
        "chat": openai_up, "responses": openai_up, "messages": anthropic_up}
    assert upstream_for(APIS["messages"], state.upstream, state.anthropic) is anthropic_up
    keys = {name: state.upstream_key(api, who) for name, api in APIS.items()}
    assert keys == {"chat": "sk-caller", "responses": "sk-caller",
                    "messages": "sk-ant" if mode == "proxy_keys" else "sk-caller"}
