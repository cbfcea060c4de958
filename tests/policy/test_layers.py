"""Resolution rules of the policy layers (SPEC section 7), without a server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from proxy.errors import ConfigError
from proxy.policy.layers import (
    EMPTY,
    LayerWriteError,
    check_clear,
    check_write,
    effective_policy,
    field_states,
    view_json,
)
from proxy.policy.live import PolicyService
from proxy.policy.model import FIELDS, ProtectedRule
from proxy.policy.platform import PlatformConfig, load_policies, parse_platform
from proxy.policy.rows import load_snapshot, write_layer
from proxy.store import Store

TRIGGER = "compaction.trigger_ratio"


def platform(text: str = "") -> PlatformConfig:
    return parse_platform(yaml.safe_load(text) or {}, "platform.yaml")


def test_field_set_only_at_platform_level() -> None:
    cfg = platform("defaults: {compaction: {trigger_ratio: 0.9}}")
    s = field_states(cfg, EMPTY, EMPTY)[TRIGGER]
    assert (s.effective, s.platform, s.org, s.user) == (0.9, 0.9, None, None)
    assert not (s.locked or s.clamped or s.ignored)
    assert effective_policy(cfg, EMPTY, EMPTY).compaction.trigger_ratio == 0.9
    # fields the platform file leaves out keep the embedded defaults
    assert field_states(cfg, EMPTY, EMPTY)["masking.keep_recent"].effective == 5


def test_organization_overrides_platform_only_where_it_sets() -> None:
    cfg = platform("defaults: {compaction: {trigger_ratio: 0.9, keep_ratio: 0.2}}")
    states = field_states(cfg, {TRIGGER: 0.7}, EMPTY)
    assert (states[TRIGGER].effective, states[TRIGGER].org) == (0.7, 0.7)
    assert states["compaction.keep_ratio"].effective == 0.2
    assert states["compaction.keep_ratio"].org is None


def test_user_overrides_organization() -> None:
    cfg = platform()
    org = {TRIGGER: 0.7, "masking.keep_recent": 9}
    states = field_states(cfg, org, {TRIGGER: 0.6})
    assert (states[TRIGGER].effective, states[TRIGGER].platform, states[TRIGGER].org,
            states[TRIGGER].user) == (0.6, 0.8, 0.7, 0.6)
    assert states["masking.keep_recent"].effective == 9  # inherited from the organization
    policy = effective_policy(cfg, org, {TRIGGER: 0.6})
    assert (policy.compaction.trigger_ratio, policy.masking.keep_recent) == (0.6, 9)


def test_locked_field_ignores_stored_values_and_refuses_writes() -> None:
    cfg = platform("locks: [masking.enabled]")
    s = field_states(cfg, {"masking.enabled": False}, {"masking.enabled": False})[
        "masking.enabled"]
    assert (s.effective, s.org, s.user, s.locked, s.ignored) == (True, False, False, True, True)
    assert effective_policy(cfg, {"masking.enabled": False}, EMPTY).masking.enabled is True
    with pytest.raises(LayerWriteError) as info:
        check_write(cfg, "acme", None, {"masking.enabled": False})
    assert info.value.status == 409 and "masking.enabled" in info.value.message
    assert info.value.param == "masking.enabled"
    # a locked field with nothing stored is locked but not ignored
    s = field_states(cfg, EMPTY, EMPTY)["masking.enabled"]
    assert (s.locked, s.ignored) == (True, False)
    # unsetting the ignored value is allowed: it changes nothing that runs
    assert check_write(cfg, "acme", None, {"masking.enabled": None}) == {"masking.enabled": None}


def test_lock_wins_over_bounds_without_clamping() -> None:
    cfg = platform("locks: [compaction.trigger_ratio]\n"
                   "bounds: {compaction.trigger_ratio: {min: 0.5, max: 0.9}}")
    s = field_states(cfg, {TRIGGER: 0.2}, EMPTY)[TRIGGER]
    assert (s.effective, s.org, s.ignored, s.clamped) == (0.8, 0.2, True, False)


def test_out_of_bounds_value_is_clamped_at_read_time() -> None:
    cfg = platform("bounds: {compaction.trigger_ratio: {min: 0.5, max: 0.95},"
                   " masking.keep_recent: {max: 10}}")
    low = field_states(cfg, {TRIGGER: 0.3}, EMPTY)[TRIGGER]
    assert (low.effective, low.org, low.clamped) == (0.5, 0.3, True)
    high = field_states(cfg, {TRIGGER: 0.6}, {TRIGGER: 0.99})[TRIGGER]
    assert (high.effective, high.user, high.clamped) == (0.95, 0.99, True)
    inside = field_states(cfg, {TRIGGER: 0.7}, EMPTY)[TRIGGER]
    assert (inside.effective, inside.clamped) == (0.7, False)
    keep = field_states(cfg, {"masking.keep_recent": 50}, EMPTY)["masking.keep_recent"]
    assert keep.effective == 10 and isinstance(keep.effective, int)
    # writing an out-of-bounds (but valid) value is accepted: bounds apply at read time
    assert check_write(cfg, "acme", None, {TRIGGER: 0.3}) == {TRIGGER: 0.3}


def test_yaml_managed_organization_refuses_writes() -> None:
    cfg = platform("orgs: {acme: {policy: {compaction: {trigger_ratio: 0.7}},"
                   " users: {alice: {policy: {compaction: {trigger_ratio: 0.6}}}}}}")
    for user in (None, "alice", "bob"):
        with pytest.raises(LayerWriteError) as info:
            check_write(cfg, "acme", user, {TRIGGER: 0.75})
        assert info.value.status == 409 and "YAML" in info.value.message
        with pytest.raises(LayerWriteError):
            check_clear(cfg, "acme", user)
    check_write(cfg, "other", None, {TRIGGER: 0.75})


@pytest.mark.parametrize("body, status, param", [
    ([], 400, None),
    ("x", 400, None),
    ({}, 400, None),
    ({"compaction.nope": 1}, 400, "compaction.nope"),
    ({TRIGGER: "high"}, 400, TRIGGER),
    ({TRIGGER: 7}, 400, TRIGGER),
    ({"masking.keep_recent": 2.5}, 400, "masking.keep_recent"),
    ({"masking.enabled": "yes"}, 400, "masking.enabled"),
    ({"compaction.protected": [{"colour": "red"}]}, 400, "compaction.protected"),
    ({TRIGGER: 0.7, "bogus": 1}, 400, "bogus"),
])
def test_bad_writes_name_the_field(body: object, status: int, param: str | None) -> None:
    with pytest.raises(LayerWriteError) as info:
        check_write(platform(), "acme", None, body)
    assert (info.value.status, info.value.param) == (status, param)
    if param:
        assert param in info.value.message


@pytest.mark.parametrize("org, user", [("", None), ("a/b", None), ("acme", ""),
                                       ("x" * 201, None), ("ac\nme", None)])
def test_bad_names_are_refused(org: str, user: str | None) -> None:
    with pytest.raises(LayerWriteError) as info:
        check_write(platform(), org, user, {TRIGGER: 0.7})
    assert info.value.status == 400


def test_view_json_serializes_every_field() -> None:
    cfg = platform("models: {m: {context_window: 1000}}")
    fields = view_json(field_states(cfg, {"compaction.protected": (ProtectedRule(name="n"),),
                                          "masking.exclude_tools": ("grep",)}, EMPTY))
    assert set(fields) == set(FIELDS)
    json.dumps(fields)  # plain JSON
    assert fields["compaction.protected"]["org"] == [{"name": "n"}]
    assert fields["compaction.protected"]["platform"] == [{"marker": "<memory>"},
                                                          {"marker": "<recent_notes>"}]
    assert fields["masking.exclude_tools"]["effective"] == ["grep"]
    assert fields["models"]["effective"] == {"m": 1000}
    assert set(fields[TRIGGER]) == {"effective", "platform", "org", "user", "locked", "clamped",
                                    "ignored"}


# --- the policies folder --------------------------------------------------------------------


def test_org_files_are_merged(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text("orgs: {acme: {policy: {}}}\n")
    (tmp_path / "teams.yaml").write_text("orgs: {beta: {policy: {masking: {keep_recent: 2}}}}\n")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    cfg = load_policies(tmp_path)
    assert set(cfg.orgs) == {"acme", "beta"}
    assert cfg.orgs["beta"].policy == {"masking.keep_recent": 2}
    assert cfg.org_files["beta"] == str(tmp_path / "teams.yaml")


def test_duplicate_org_across_files_names_both(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text("orgs: {acme: {policy: {}}}\n")
    (tmp_path / "more.yaml").write_text("orgs: {acme: {policy: {}}}\n")
    with pytest.raises(ConfigError) as info:
        load_policies(tmp_path)
    assert "more.yaml" in str(info.value) and "platform.yaml" in str(info.value)
    assert "orgs.acme" in str(info.value)


@pytest.mark.parametrize("name, text, key", [
    ("extra.yaml", "defaults: {}\n", "defaults"),
    ("extra.yaml", "orgs: {beta: {policy: {masking: {keep_recent: -1}}}}\n",
     "orgs.beta.policy.masking.keep_recent"),
    ("extra.yaml", "orgs: [unclosed\n", "not valid YAML"),
    ("platform.yaml", "bounds: {compaction.trigger_ratio: {max: 7}}\n",
     "bounds.compaction.trigger_ratio.max"),
    ("platform.yaml", "bounds: {masking.keep_recent: {min: 1.5}}\n",
     "bounds.masking.keep_recent.min"),
    ("platform.yaml", "defaults: {compaction: {trigger_ratio: 0.3}}\n"
     "bounds: {compaction.trigger_ratio: {min: 0.5}}\n", "defaults.compaction.trigger_ratio"),
])
def test_broken_folder_names_file_and_key(tmp_path: Path, name: str, text: str,
                                          key: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_policies(tmp_path)
    assert name in str(info.value) and key in str(info.value)


# --- the service: stored layers, cache, invalidation ----------------------------------------


@pytest.fixture
def store(store_target: Callable[[str], Path | str]) -> Iterator[Store]:
    s = Store(store_target("p.db"))
    yield s
    s.close()


@pytest.fixture
def other(store: Store, store_target: Callable[[str], Path | str]) -> Iterator[Store]:
    """A second store on the same database: the writes of another process (the CLI)."""
    s = Store(store_target("p.db"))
    yield s
    s.close()


async def test_service_resolves_from_memory_and_invalidates_on_write(store: Store) -> None:
    svc = PolicyService(platform(), store)
    assert svc.resolve("acme").compaction.trigger_ratio == 0.8
    await svc.set_fields("acme", None, {TRIGGER: 0.7})
    await svc.set_fields("acme", "alice", {TRIGGER: 0.6})
    assert svc.resolve("acme").compaction.trigger_ratio == 0.7
    assert svc.resolve("acme", "alice").compaction.trigger_ratio == 0.6
    assert svc.resolve("acme", "bob").compaction.trigger_ratio == 0.7
    assert svc.resolve("acme", "alice") is svc.resolve("acme", "alice")  # cached
    view = await svc.clear("acme", None)
    assert view["fields"][TRIGGER]["effective"] == 0.8  # "use the platform default"
    assert svc.resolve("acme").compaction.trigger_ratio == 0.8
    assert svc.resolve("acme", "alice").compaction.trigger_ratio == 0.6  # user layer stays
    await svc.set_fields("acme", "alice", {TRIGGER: None})  # unsetting the only field
    assert store.snapshot(load_snapshot).layers == {}


async def test_write_of_another_process_is_picked_up_by_refresh(store: Store, other: Store
                                                               ) -> None:
    svc = PolicyService(platform(), store)
    assert svc.resolve("acme").compaction.trigger_ratio == 0.8
    other.atomic(write_layer, "acme", None, {TRIGGER: 0.65})  # e.g. the CLI
    assert svc.resolve("acme").compaction.trigger_ratio == 0.8  # no database on the hot path
    assert await svc.refresh() is True
    assert svc.resolve("acme").compaction.trigger_ratio == 0.65
    assert await svc.refresh() is False


async def test_interleaved_foreign_write_is_not_lost(store: Store, other: Store) -> None:
    svc = PolicyService(platform(), store)
    other.atomic(write_layer, "beta", None, {TRIGGER: 0.6})  # not yet seen by svc
    await svc.set_fields("acme", None, {TRIGGER: 0.7})
    await svc.refresh()
    assert svc.resolve("beta").compaction.trigger_ratio == 0.6
    assert svc.resolve("acme").compaction.trigger_ratio == 0.7


async def test_stored_row_keeps_out_of_bounds_value(store: Store) -> None:
    svc = PolicyService(platform("bounds: {compaction.trigger_ratio: {min: 0.5}}"), store)
    view = await svc.set_fields("acme", None, {TRIGGER: 0.3})
    assert view["fields"][TRIGGER] == {"effective": 0.5, "platform": 0.8, "org": 0.3,
                                             "user": None, "locked": False, "clamped": True,
                                             "ignored": False}
    row = store.read_one("SELECT fields FROM policy_layers")
    assert json.loads(row[0]) == {TRIGGER: 0.3}
    assert svc.resolve("acme").compaction.trigger_ratio == 0.5


async def test_platform_reload_replaces_cached_policies(store: Store) -> None:
    svc = PolicyService(platform(), store)
    await svc.set_fields("acme", None, {"masking.enabled": False})
    assert svc.resolve("acme").masking.enabled is False
    svc.set_platform(platform("locks: [masking.enabled]"))
    assert svc.resolve("acme").masking.enabled is True  # stored before the lock: ignored
    assert svc.view("acme")["fields"]["masking.enabled"]["ignored"] is True


def test_bad_stored_field_is_dropped_not_fatal(store: Store) -> None:
    store.atomic(lambda tx: tx.execute(
        "INSERT INTO policy_layers VALUES ('acme', '', ?, 0)",
        [json.dumps({TRIGGER: 0.7, "gone.field": 1, "masking.keep_recent": "x"})]))
    svc = PolicyService(platform(), store)
    assert svc.resolve("acme").compaction.trigger_ratio == 0.7


def test_list_orgs_merges_sources(store: Store) -> None:
    store.atomic(write_layer, "beta", "bob", {TRIGGER: 0.7})
    store.atomic(write_layer, "gamma", None, {TRIGGER: 0.7})
    store.keys.create("delta")
    store.keys.create("gamma")
    svc = PolicyService(platform("orgs: {acme: {users: {alice: {policy: {}}}}}"), store)
    from proxy.store.keys import key_counts

    orgs = {o["org"]: o for o in svc.list_orgs(store.snapshot(key_counts))}
    assert list(orgs) == ["acme", "beta", "delta", "gamma"]
    assert orgs["acme"]["managed_by"] == "yaml" and orgs["acme"]["users"] == ["alice"]
    assert (orgs["beta"]["org_layer"], orgs["beta"]["users"]) == (False, ["bob"])
    assert (orgs["gamma"]["org_layer"], orgs["gamma"]["keys"]) == (True, 1)
    assert orgs["delta"] == {"org": "delta", "managed_by": "api", "file": None,
                             "org_layer": False, "users": [], "keys": 1}
