"""Stored policy layers (``proxy.policy.rows``) on the suite's backend: a write merges into its
layer (``None`` unsets a field, an emptied layer's row goes) and moves ``policy_version``; a
stored field that no longer validates is dropped with a warning, not the whole layer."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import pytest

from proxy.policy.model import ProtectedRule
from proxy.policy.rows import (
    clear_layer,
    load_layers,
    load_snapshot,
    parse_fields,
    read_version,
    to_json,
    write_layer,
)
from proxy.store import Store


def test_to_json_turns_tuples_and_rules_into_plain_json() -> None:
    assert to_json({"a": (1, 2), "b": (ProtectedRule(marker="<m>"), ProtectedRule(name="n"))}) \
        == {"a": [1, 2], "b": [{"marker": "<m>"}, {"name": "n"}]}


def test_writes_merge_unset_and_move_the_version(new_store: Callable[[str], Store]) -> None:
    store = new_store("p.db")
    assert store.snapshot(read_version) == 0
    first = store.atomic(write_layer, "acme", None, {"masking.keep_recent": 3,
                                                    "masking.exclude_tools": ("grep",)})
    assert (first.fields, first.old_version, first.new_version) == (
        {"masking.keep_recent": 3, "masking.exclude_tools": ("grep",)}, 0, 1)
    store.atomic(write_layer, "acme", "alice", {"rerank.keep": 2})
    second = store.atomic(write_layer, "acme", None, {"masking.keep_recent": None,
                                                     "compaction.enabled": False})
    assert second.fields == {"masking.exclude_tools": ("grep",), "compaction.enabled": False}
    snap = store.snapshot(load_snapshot)
    assert snap.version == 3
    assert snap.layers == {("acme", ""): {"masking.exclude_tools": ("grep",),
                                          "compaction.enabled": False},
                           ("acme", "alice"): {"rerank.keep": 2}}
    assert store.snapshot(load_layers, "acme", None) == {("acme", ""): snap.layers[("acme", "")]}
    assert set(store.snapshot(load_layers, "acme", "alice")) == {("acme", ""), ("acme", "alice")}


def test_an_emptied_or_cleared_layer_has_no_row(new_store: Callable[[str], Store]) -> None:
    store = new_store("p.db")
    store.atomic(write_layer, "acme", None, {"rerank.keep": 2})
    emptied = store.atomic(write_layer, "acme", None, {"rerank.keep": None})
    assert emptied.fields == {}
    assert store.read("SELECT * FROM policy_layers") == []
    store.atomic(write_layer, "beta", "bob", {"rerank.keep": 4})
    cleared = store.atomic(clear_layer, "beta", "bob")
    assert (cleared.fields, cleared.new_version) == ({}, cleared.old_version + 1)
    assert store.read("SELECT * FROM policy_layers") == []
    again = store.atomic(clear_layer, "nobody", None)  # clearing an absent layer still writes
    assert again.new_version == again.old_version + 1


def test_a_stored_field_that_no_longer_validates_is_dropped_alone(
        new_store: Callable[[str], Store], caplog: pytest.LogCaptureFixture) -> None:
    store = new_store("p.db")
    store.atomic(lambda tx: tx.execute(
        'INSERT INTO policy_layers (org, "user", fields, updated_at) VALUES (?, ?, ?, ?)',
        ["acme", "", json.dumps({"rerank.keep": 2, "rerank.kep": 3, "masking.enabled": "x"}),
         time.time()]))
    with caplog.at_level(logging.WARNING, logger="context_proxy.policy"):
        assert store.snapshot(load_snapshot).layers == {("acme", ""): {"rerank.keep": 2}}
    assert "stored field 'rerank.kep' ignored" in caplog.text
    assert "stored field 'masking.enabled' ignored" in caplog.text
    assert parse_fields("not json", "acme", "") == {}
    assert parse_fields("[1]", "acme", "bob") == {}
