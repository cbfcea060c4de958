"""The live policy (``proxy.policy.live.PolicyService``) on the suite's backend: resolving
is a dictionary hit once computed, a write of this process is in force at once and one of
another process after ``refresh``, YAML organizations refuse API writes, and the listing shows
every organization that has a layer, a YAML entry or a key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.policy.layers import LayerWriteError
from proxy.policy.live import PolicyService
from proxy.policy.platform import OrgSpec, PlatformConfig
from proxy.policy.rows import write_layer
from proxy.store import Store

PLATFORM = PlatformConfig(defaults={"masking.keep_recent": 4},
                          orgs={"yamlco": OrgSpec(policy={"rerank.keep": 3})},
                          org_files={"yamlco": "policies/yamlco.yaml"})


async def test_a_write_is_in_force_at_once_and_cached_policies_are_reused(
        store_target: Callable[[str], Path | str]) -> None:
    store = Store(store_target("p.db"))
    try:
        service = PolicyService(PLATFORM, store)
        before = service.resolve("acme", "alice")
        assert before.masking.keep_recent == 4 and service.resolve("acme", "alice") is before
        view = await service.set_fields("acme", "alice", {"masking.keep_recent": 7})
        assert view["fields"]["masking.keep_recent"]["effective"] == 7
        assert service.resolve("acme", "alice").masking.keep_recent == 7
        assert service.resolve("acme").masking.keep_recent == 4
        await service.clear("acme", "alice")
        assert service.resolve("acme", "alice").masking.keep_recent == 4
        assert await service.refresh() is False  # nothing changed elsewhere
    finally:
        store.close()


async def test_another_processs_write_is_seen_after_refresh(
        store_target: Callable[[str], Path | str]) -> None:
    mine, theirs = Store(store_target("p.db")), Store(store_target("p.db"))
    try:
        service = PolicyService(PLATFORM, mine)
        assert service.resolve("acme").rerank.keep == 8
        theirs.atomic(write_layer, "acme", None, {"rerank.keep": 5})
        assert service.resolve("acme").rerank.keep == 8  # until refreshed
        assert await service.refresh() is True
        assert service.resolve("acme").rerank.keep == 5
    finally:
        mine.close()
        theirs.close()


async def test_yaml_organizations_refuse_api_writes_and_set_platform_drops_the_cache() -> None:
    service = PolicyService(PLATFORM)
    assert service.managed_by("yamlco") == "yaml" and service.managed_by("acme") == "api"
    assert service.resolve("yamlco").rerank.keep == 3
    with pytest.raises(LayerWriteError) as info:
        await service.set_fields("yamlco", None, {"rerank.keep": 2})
    assert info.value.status == 409
    with pytest.raises(RuntimeError, match="no store attached"):
        await service.set_fields("acme", None, {"rerank.keep": 2})
    service.set_platform(PlatformConfig(defaults={"masking.keep_recent": 1}))
    assert service.resolve("yamlco").rerank.keep == 8 and service.resolve(
        "acme").masking.keep_recent == 1
    assert await service.refresh() is False  # no store: nothing to reload


def test_list_orgs_names_yaml_stored_and_keyed_organizations(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("p.db")
    store.atomic(write_layer, "acme", "alice", {"rerank.keep": 2})
    store.atomic(write_layer, "beta", None, {"rerank.keep": 2})
    service = PolicyService(PLATFORM, store)
    listed = {o["org"]: o for o in service.list_orgs({"keyed": 2, "acme": 1})}
    assert sorted(listed) == ["acme", "beta", "keyed", "yamlco"]
    assert listed["acme"] == {"org": "acme", "managed_by": "api", "file": None,
                              "org_layer": False, "users": ["alice"], "keys": 1}
    assert listed["beta"]["org_layer"] and listed["keyed"]["keys"] == 2
    assert listed["yamlco"]["file"] == "policies/yamlco.yaml" and listed["yamlco"]["org_layer"]
    assert service.view("beta")["fields"]["rerank.keep"]["effective"] == 2
