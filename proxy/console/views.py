"""The "Context & retrieval" page's model: one row per policy field, and the edit form's parsing.

The form holds one input per field with the value the edited layer stores (empty: the layer
does not set it). On submit only the fields whose text changed are sent to the policy service,
which applies the admin API's checks (``proxy.policy.layers.check_write``): nothing here
validates a value itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.model import FIELDS
from proxy.policy.platform import PlatformConfig

SECTIONS = (("masking", "Tool-output masking"), ("compaction", "Compaction"),
            ("rerank", "Retrieval rerank"), ("", "Models and windows"))


def kind_of(name: str) -> str:
    """How a field is edited: ``bool`` (a select), ``text`` (a plain string) or ``json``."""
    default = FIELDS[name].default
    if isinstance(default, bool):
        return "bool"
    if default is None or isinstance(default, str):
        return "text"
    return "json"


def shown(value: Any) -> str:
    """A value as the page shows it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def form_text(name: str, value: Any) -> str:
    """A stored value as its input holds it (``""``: not set)."""
    if value is None:
        return ""
    if kind_of(name) == "text":
        return str(value)
    return json.dumps(value)


def parse_text(name: str, text: str) -> Any:
    """An input's text as the value sent to the checks: JSON where it parses (numbers, lists,
    booleans), else the text itself, which the checks refuse for a non-string field."""
    if kind_of(name) == "text":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Row:
    name: str
    kind: str
    effective: str
    platform: str
    org: str
    user: str
    value: str  # the input's text: the edited layer's stored value, or what was typed
    locked: bool
    clamped: bool
    ignored: bool
    reasons: tuple[str, ...]  # why each badge is shown, or why the input is disabled
    error: str | None
    stored: bool = False  # the edited layer stores a value (ignored ones too): it can be cleared


def _reasons(name: str, f: Mapping[str, Any], bounds: tuple[Any, Any] | None) -> list[str]:
    out = []
    if f["locked"]:
        out.append("Locked by the platform: organizations and users cannot change it.")
    if f["ignored"]:
        out.append("A stored value is ignored because the field is locked.")
    if f["clamped"] and bounds is not None:
        lo, hi = bounds
        limits = " and ".join(x for x in (f"at least {lo}" if lo is not None else "",
                                          f"at most {hi}" if hi is not None else "") if x)
        out.append(f"Clamped to {shown(f['effective'])}: the platform allows {limits}.")
    return out


def rows(view: Mapping[str, Any], platform: PlatformConfig, layer: str | None,
         typed: Mapping[str, str] | None = None, error: tuple[str | None, str] | None = None
         ) -> dict[str, list[Row]]:
    """Section title -> its rows. ``layer`` (``org``/``user``/``None`` for the platform) is the
    one the form edits; ``typed`` keeps what was typed after a refused write."""
    out: dict[str, list[Row]] = {title: [] for _, title in SECTIONS}
    titles = dict(SECTIONS)
    for name, f in view["fields"].items():
        section = titles.get(name.split(".", 1)[0] if "." in name else "", "")
        stored = f[layer] if layer else f["platform"]
        value = typed[name] if typed is not None and name in typed else form_text(name, stored)
        out[section].append(Row(
            name, kind_of(name), shown(f["effective"]), shown(f["platform"]), shown(f["org"]),
            shown(f["user"]), value, f["locked"], f["clamped"], f["ignored"],
            tuple(_reasons(name, f, platform.bounds.get(name))),
            error[1] if error is not None and error[0] == name else None,
            bool(layer) and stored is not None))
    return out


def patch_from_form(form: Mapping[str, str], view: Mapping[str, Any], layer: str
                    ) -> tuple[dict[str, Any], dict[str, str]]:
    """(the patch to send, every field's text as typed). A field whose text equals its stored
    value is left out; an emptied one is unset (``None``). Disabled inputs (locked fields) are
    not submitted by a browser, so they are absent here and left alone."""
    patch: dict[str, Any] = {}
    typed: dict[str, str] = {}
    for name in FIELDS:
        if name not in form:
            continue
        text = form[name].strip()
        typed[name] = text
        stored = view["fields"][name][layer]
        if text == form_text(name, stored):
            continue
        patch[name] = None if text == "" else parse_text(name, text)
    return patch, typed
