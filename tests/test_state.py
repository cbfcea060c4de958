"""The application's typed state (``proxy.state``): after start-up ``app[STATE]`` holds every
resource a handler reaches, of its type, frozen; ``app[SETTINGS]`` the settings it was made
with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from inproc import settings_for, started

from proxy.auth import Authenticator
from proxy.context.checked import CheckedLists
from proxy.context.managed import ContextService
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.state import SETTINGS, STATE, ProxyState
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
