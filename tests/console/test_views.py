"""The "Context & retrieval" page's model (``proxy.console.views``): how each field is edited and
shown, one row per field with its badges' reasons, and the form turned into the patch that
changed fields make (an emptied one unset)."""

from __future__ import annotations

from typing import Any

from proxy.console.views import form_text, kind_of, parse_text, patch_from_form, rows, shown
from proxy.policy.layers import field_states, view_json
from proxy.policy.platform import PlatformConfig

PLATFORM = PlatformConfig(locks=frozenset({"masking.enabled"}),
                          bounds={"compaction.trigger_ratio": (0.5, 0.9)})


def view(org: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"fields": view_json(field_states(PLATFORM, org or {}, {}))}


def test_each_field_has_its_kind_and_shown_value() -> None:
    assert (kind_of("masking.enabled"), kind_of("compaction.summary_model"),
            kind_of("rerank.keep"), kind_of("models")) == ("bool", "text", "json", "json")
    assert [shown(v) for v in (None, True, "m", [1, 2])] == ["—", "true", "m", "[1, 2]"]
    assert form_text("rerank.keep", 3) == "3" and form_text("rerank.model", "x") == "x"
    assert form_text("rerank.keep", None) == ""
    assert parse_text("rerank.keep", "4") == 4 and parse_text("rerank.keep", "four") == "four"
    assert parse_text("rerank.model", "4") == "4"


def test_rows_carry_the_layers_the_badges_and_their_reasons() -> None:
    sections = rows(view({"masking.enabled": False, "compaction.trigger_ratio": 0.95}),
                    PLATFORM, "org")
    assert list(sections) == ["Tool-output masking", "Compaction", "Retrieval rerank",
                              "Models and windows"]
    by_name = {r.name: r for rs in sections.values() for r in rs}
    locked = by_name["masking.enabled"]
    assert locked.locked and locked.ignored and locked.stored and locked.value == "false"
    assert locked.reasons[0].startswith("Locked by the platform")
    clamped = by_name["compaction.trigger_ratio"]
    assert clamped.clamped and clamped.effective == "0.9"
    assert clamped.reasons == ("Clamped to 0.9: the platform allows at least 0.5 and at most "
                               "0.9.",)
    assert by_name["models"].kind == "json" and not by_name["rerank.keep"].stored


def test_a_refused_write_keeps_what_was_typed_and_names_the_field() -> None:
    sections = rows(view(), PLATFORM, "org", typed={"rerank.keep": "lots"},
                    error=("rerank.keep", "expected an integer"))
    row = next(r for rs in sections.values() for r in rs if r.name == "rerank.keep")
    assert (row.value, row.error) == ("lots", "expected an integer")


def test_the_patch_holds_only_changed_fields_and_unsets_emptied_ones() -> None:
    current = view({"rerank.keep": 3, "compaction.summary_model": "mini"})
    form = {"rerank.keep": "3", "compaction.summary_model": "", "masking.keep_recent": " 7 ",
            "not.a.field": "x"}
    patch, typed = patch_from_form(form, current, "org")
    assert patch == {"compaction.summary_model": None, "masking.keep_recent": 7}
    assert typed == {"rerank.keep": "3", "compaction.summary_model": "",
                     "masking.keep_recent": "7"}
