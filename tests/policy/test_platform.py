"""Platform YAML (``proxy.policy.platform``) and policy field values: validated once, errors
name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.errors import ConfigError
from proxy.policy.model import FIELDS, build_policy
from proxy.policy.platform import PlatformConfig, load_platform, parse_platform

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_platform_yaml_equals_embedded_defaults() -> None:
    shipped = load_platform(ROOT / "policies")
    embedded = PlatformConfig()
    assert build_policy(shipped.defaults) == build_policy(embedded.defaults)
    assert set(shipped.defaults) == set(FIELDS)  # the shipped file documents every field
    assert (shipped.upstream_url, shipped.auth_mode, shipped.locks) == (
        embedded.upstream_url, embedded.auth_mode, embedded.locks)


def test_spec_example_parses() -> None:
    doc = yaml.safe_load("""
upstream: {base_url: "https://api.openai.com/v1", api_key_env: OPENAI_API_KEY}
auth: {mode: proxy_keys}
fallback_window: 200000
models: {my-llama: {context_window: 32768}}
defaults:
  masking: {enabled: true, trigger_ratio: 0.55, keep_recent: 5, exclude_tools: []}
  compaction: {enabled: true, trigger_ratio: 0.80, keep_ratio: 0.10, pinned_tools: [write_todos]}
  rerank: {enabled: false, keep: 8, candidates: 24, timeout_ms: 1500}
locks: [masking.enabled]
bounds: {compaction.trigger_ratio: {min: 0.5, max: 0.95}}
orgs:
  acme: {policy: {compaction: {trigger_ratio: 0.7}}, users: {alice: {policy: {}}}}
""")
    cfg = parse_platform(doc, "platform.yaml")
    assert cfg.defaults["models"] == {"my-llama": 32768}
    assert cfg.locks == {"masking.enabled"}
    assert cfg.bounds["compaction.trigger_ratio"] == (0.5, 0.95)
    assert cfg.orgs["acme"].policy == {"compaction.trigger_ratio": 0.7}
    assert cfg.orgs["acme"].users == {"alice": {}}


@pytest.mark.parametrize("doc, key", [
    ({"bogus": 1}, "bogus"),
    ({"defaults": {"masking": {"keep_recent": "five"}}}, "defaults.masking.keep_recent"),
    ({"defaults": {"compaction": {"trigger_ratio": 1.5}}}, "defaults.compaction.trigger_ratio"),
    ({"defaults": {"compaction": {"nope": 1}}}, "defaults.compaction.nope"),
    ({"defaults": {"weird": {}}}, "defaults.weird"),
    ({"locks": ["masking.nope"]}, "locks"),
    ({"bounds": {"masking.enabled": {"min": 0}}}, "bounds.masking.enabled"),
    ({"bounds": {"compaction.trigger_ratio": {"min": 0.9, "max": 0.5}}},
     "bounds.compaction.trigger_ratio"),
    ({"auth": {"mode": "open"}}, "auth.mode"),
    ({"upstream": {"base_url": "ftp://x"}}, "upstream.base_url"),
    ({"orgs": {"acme": {"policy": {"masking": {"enabled": "yes"}}}}},
     "orgs.acme.policy.masking.enabled"),
    ({"models": {"m": {"context_window": -1}}}, "models"),
    ({"upstream": {"send_org_header": "yes"}}, "upstream.send_org_header"),
    ({"upstream": {"send_org_header": 1}}, "upstream.send_org_header"),
    ({"upstream": {"send_org_headers": True}}, "send_org_header"),
    ({"upstream": {"serves_compaction_trigger": "maybe"}}, "upstream.serves_compaction_trigger"),
])
def test_invalid_platform_names_file_and_key(doc: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_platform(doc, "policies/platform.yaml")
    assert "policies/platform.yaml" in str(info.value)
    assert key in str(info.value)


def test_broken_yaml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text("defaults: [unclosed")
    with pytest.raises(ConfigError, match=r"platform\.yaml"):
        load_platform(tmp_path)


@pytest.mark.parametrize("value, days", [(7, 7.0), (0.5, 0.5), ("12h", 0.5), ("2d", 2.0),
                                         ("90m", 90 / 1440)])
def test_spill_retention_takes_days_or_a_duration(value: object, days: float) -> None:
    from proxy.policy.model import validate_layer

    assert validate_layer({"masking.spill_retention": value}) == \
        {"masking.spill_retention": pytest.approx(days)}


@pytest.mark.parametrize("value", [0, -1, "soon", "12x", True, "h"])
def test_bad_spill_retention(value: object) -> None:
    from proxy.policy.model import PolicyError, validate_layer

    with pytest.raises(PolicyError, match=r"masking\.spill_retention"):
        validate_layer({"masking.spill_retention": value})


def test_the_organization_header_of_summary_calls_is_opt_in() -> None:
    assert PlatformConfig().send_org_header is False
    assert parse_platform({}, "platform.yaml").send_org_header is False
    on = parse_platform({"upstream": {"send_org_header": True}}, "platform.yaml")
    assert on.send_org_header is True
    assert parse_platform({"upstream": {"send_org_header": False}}, "p.yaml").send_org_header \
        is False


def test_whether_the_upstream_serves_compaction_trigger_defaults_to_auto() -> None:
    assert parse_platform({}, "platform.yaml").serves_compaction_trigger == "auto"
    for value, mode in ((True, "true"), (False, "false"), ("auto", "auto"), ("false", "false")):
        doc = {"upstream": {"serves_compaction_trigger": value}}
        assert parse_platform(doc, "p.yaml").serves_compaction_trigger == mode
