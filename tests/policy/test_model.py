"""The policy model (``proxy.policy.model``): each field's checker takes its valid values
(normalized) and refuses others naming the field; layers are flattened, validated and
overlaid on the defaults lowest first."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.policy.model import (
    FIELDS,
    ModelPrices,
    Policy,
    PolicyError,
    ProtectedRule,
    build_policy,
    did_you_mean,
    flatten,
    unknown_field,
    validate_layer,
)


@pytest.mark.parametrize(("name", "value", "normalized"), [
    ("masking.enabled", False, False),
    ("masking.trigger_ratio", 1, 1.0),
    ("masking.min_free_ratio", 0, 0.0),
    ("masking.keep_recent", 0, 0),
    ("masking.priced", False, False),
    ("masking.spill_retention", "12h", 0.5),
    ("masking.spill_retention", "90s", 90 / 86400),
    ("masking.exclude_tools", ["grep"], ("grep",)),
    ("compaction.summary_model", None, None),
    ("compaction.summary_role", "developer", "developer"),
    ("compaction.summary_max_tokens", 16, 16),
    ("compaction.summary_timeout_s", 2, 2.0),
    ("compaction.protected", [{"marker": "<m>"}, {"name": "notes"}],
     (ProtectedRule(marker="<m>"), ProtectedRule(name="notes"))),
    ("rerank.candidates", 2, 2),
    ("models", {"a": 8192, "b": {"window": 4096, "input_per_mtok": 1}},
     {"a": 8192, "b": {"input_per_mtok": 1.0, "context_window": 4096}}),
    ("models", {"c": {"context_window": 100}}, {"c": 100}),
])
def test_a_valid_value_is_normalized(name: str, value: Any, normalized: Any) -> None:
    assert FIELDS[name].check(name, value) == normalized


@pytest.mark.parametrize(("name", "value", "says"), [
    ("masking.enabled", "yes", "expected true or false"),
    ("masking.trigger_ratio", 0, "(0, 1]"),
    ("masking.trigger_ratio", True, "between 0 and 1"),
    ("masking.min_free_ratio", 1.5, "[0, 1]"),
    ("masking.keep_recent", -1, ">= 0"),
    ("masking.keep_recent", 2.5, "an integer"),
    ("masking.priced", "no", "expected true or false"),
    ("masking.spill_retention", "12x", "duration"),
    ("masking.spill_retention", 0, "duration"),
    ("masking.exclude_tools", [""], "non-empty strings"),
    ("compaction.summary_model", " ", "non-empty string"),
    ("compaction.summary_role", "tool", "one of user"),
    ("compaction.summary_max_tokens", 15, ">= 16"),
    ("compaction.summary_timeout_s", 0, "positive"),
    ("compaction.protected", [{"marker": "x", "other": "y"}], "'marker' and/or 'name'"),
    ("compaction.protected", [{"marker": ""}], "non-empty strings"),
    ("compaction.protected", "x", "a list"),
    ("models", [1], "mapping of model name"),
    ("models", {"m": {"tokens": 5}}, "context_window and/or"),
    ("models", {"m": {"input_per_mtok": -1}}, "dollars per million"),
    ("models", {"m": 0}, ">= 1"),
])
def test_an_invalid_value_is_refused_naming_its_field(name: str, value: Any, says: str) -> None:
    with pytest.raises(PolicyError) as info:
        FIELDS[name].check(name, value)
    assert says in info.value.message and info.value.key.startswith(name)


def test_unknown_fields_suggest_the_closest_known_one() -> None:
    assert did_you_mean("compaction.trigger_ration", FIELDS) == \
        " (did you mean 'compaction.trigger_ratio'?)"
    assert did_you_mean("zzz", FIELDS) == ""
    assert unknown_field("rerank.keeep") == "unknown policy field (did you mean 'rerank.keep'?)"
    with pytest.raises(PolicyError, match=r"rerank.kep: unknown policy field .* \(in org.yaml\)"):
        validate_layer({"rerank.kep": 3}, "org.yaml")


def test_flatten_keeps_models_whole_and_refuses_unknown_sections() -> None:
    assert flatten({"masking": {"enabled": False}, "models": {"m": 9}, "fallback_window": 8}) \
        == {"masking.enabled": False, "models": {"m": 9}, "fallback_window": 8}
    with pytest.raises(PolicyError, match=re.escape(
            "unknown policy section in p.yaml (did you mean 'masking'?)")):
        flatten({"maskng": {}}, "p.yaml")
    with pytest.raises(PolicyError, match="expected a mapping"):
        flatten({"rerank": True})
    with pytest.raises(PolicyError, match="expected a mapping in policy"):
        flatten(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_build_policy_overlays_layers_lowest_first() -> None:
    platform = validate_layer({"masking.keep_recent": 3, "compaction.trigger_ratio": 0.7,
                               "models": {"m": {"context_window": 4096, "output_per_mtok": 2}}})
    org = validate_layer({"masking.keep_recent": 9})
    policy = build_policy(platform, org)
    assert (policy.masking.keep_recent, policy.compaction.trigger_ratio) == (9, 0.7)
    assert policy.models == {"m": 4096}
    assert policy.prices == {"m": ModelPrices(output_per_mtok=2.0)}
    assert build_policy() == Policy()
    assert {n for n, s in FIELDS.items() if s.numeric} >= {"masking.trigger_ratio",
                                                          "fallback_window"}
