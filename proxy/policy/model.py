"""The policy model: every field of SPEC section 7 as frozen dataclasses.

A policy is built from a flat mapping of dotted field names (``compaction.trigger_ratio``) to
values. Each layer (platform, organization, user) is such a mapping holding only the fields it
sets; ``build_policy`` overlays them on the defaults. Validation happens here, once, when a layer
is loaded or written, so the request path only ever sees valid, frozen objects.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class PolicyError(ValueError):
    """A policy value or field is invalid. ``key`` is the dotted field name at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class ProtectedRule:
    """A message is protected when its text contains ``marker`` or its ``name`` equals ``name``."""

    marker: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class MaskingPolicy:
    enabled: bool = True
    trigger_ratio: float = 0.55
    keep_recent: int = 5
    exclude_tools: tuple[str, ...] = ()
    in_steps: bool = True
    min_free_ratio: float = 0.05
    priced: bool = True  # a step is taken when it pays at the model's prices (else: the seed's
    # rule, a step whenever the trigger is crossed)
    clear_tool_inputs: bool = True  # arguments of old calls larger than min_input_tokens
    min_input_tokens: int = 1000
    spill_retention: float = 7.0  # days; YAML and the API also take "12h", "30m", "90s"


@dataclass(frozen=True)
class CompactionPolicy:
    enabled: bool = True
    trigger_ratio: float = 0.80
    keep_ratio: float = 0.10
    summary_ratio: float = 0.10
    summary_max_tokens: int = 4096
    summary_model: str | None = None
    summary_timeout_s: float = 60.0
    protect_first_user: bool = True
    pinned_tools: tuple[str, ...] = ("write_todos",)
    protected: tuple[ProtectedRule, ...] = (
        ProtectedRule(marker="<memory>"),
        ProtectedRule(marker="<recent_notes>"),
    )
    summary_role: str = "user"
    # Summaries prepared in the background from here; >= trigger_ratio: off (the default,
    # docs/configuration.md: it cost more per session in bench/compaction_latency.py).
    prepare_ratio: float = 1.0


@dataclass(frozen=True)
class RerankPolicy:
    enabled: bool = False
    keep: int = 8
    candidates: int = 24
    model: str | None = None
    timeout_ms: int = 1500


@dataclass(frozen=True)
class ModelPrices:
    """A model's prices from the policy's ``models`` table, US dollars per million tokens; a
    price left out comes from litellm's cost map (``proxy.context.accounting.money``)."""

    input_per_mtok: float | None = None
    cached_per_mtok: float | None = None
    write_per_mtok: float | None = None
    output_per_mtok: float | None = None


PRICE_FIELDS = tuple(ModelPrices.__dataclass_fields__)
WINDOW_FIELDS = ("context_window", "window")
MODES = ("managed", "shadow")
_ROLES = ("user", "assistant", "system", "developer")
BOUND_FIELD = "reasoning_bound"  # whether the model binds replayed reasoning to its prefix


@dataclass(frozen=True)
class Policy:
    masking: MaskingPolicy = field(default_factory=MaskingPolicy)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    rerank: RerankPolicy = field(default_factory=RerankPolicy)
    models: Mapping[str, int] = field(default_factory=dict)  # model -> window
    fallback_window: int = 200_000
    prices: Mapping[str, ModelPrices] = field(default_factory=dict)  # from ``models`` too
    bound: Mapping[str, bool] = field(default_factory=dict)  # ``models``' reasoning_bound
    mode: str = "managed"  # shadow: plan, forward the client's bytes, report what it would do


# --- field registry -------------------------------------------------------------------------


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise PolicyError(key, f"expected true or false, got {v!r}")


def _ratio(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise PolicyError(key, f"expected a number between 0 and 1, got {v!r}")
    if not 0 < float(v) <= 1:
        raise PolicyError(key, f"expected a number in (0, 1], got {v!r}")
    return float(v)


def _share(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= float(v) <= 1:
        raise PolicyError(key, f"expected a number in [0, 1], got {v!r}")
    return float(v)


def _int_min(lo: int) -> Callable[[str, Any], int]:
    def check(key: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise PolicyError(key, f"expected an integer, got {v!r}")
        if v < lo:
            raise PolicyError(key, f"expected an integer >= {lo}, got {v!r}")
        return v

    return check


def _pos_float(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise PolicyError(key, f"expected a positive number, got {v!r}")
    return float(v)


_UNITS = {"d": 1.0, "h": 1 / 24, "m": 1 / 1440, "s": 1 / 86400}


def _non_negative(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
        raise PolicyError(key, "must be a number, 0 or more")
    return float(v)


def _retention(key: str, v: Any) -> float:
    """A duration in days: a positive number of days, or a string such as "7d", "12h", "30m"."""
    if isinstance(v, str) and len(v) > 1 and v[-1] in _UNITS:
        with contextlib.suppress(ValueError):
            v = float(v[:-1]) * _UNITS[v[-1]]
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v == float("inf"):
        raise PolicyError(key, f"expected a positive number of days or a duration such as "
                          f"'12h', got {v!r}")
    return float(v)


def _one_of(*choices: str) -> Callable[[str, Any], str]:
    def check(key: str, v: Any) -> str:
        if v in choices:
            return str(v)
        raise PolicyError(key, f"expected one of {', '.join(choices)}, got {v!r}")
    return check


def _opt_str(key: str, v: Any) -> str | None:
    if v is None or (isinstance(v, str) and v.strip()):
        return v
    raise PolicyError(key, f"expected a non-empty string or null, got {v!r}")


def _str_list(key: str, v: Any) -> tuple[str, ...]:
    if isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v):
        return tuple(v)
    raise PolicyError(key, f"expected a list of non-empty strings, got {v!r}")


def _protected(key: str, v: Any) -> tuple[ProtectedRule, ...]:
    if isinstance(v, tuple) and all(isinstance(r, ProtectedRule) for r in v):
        return v
    if not isinstance(v, list | tuple):
        raise PolicyError(key, f"expected a list of {{marker: ...}} or {{name: ...}}, got {v!r}")
    rules = []
    for item in v:
        if isinstance(item, ProtectedRule):
            rules.append(item)
            continue
        if not isinstance(item, dict) or not item or set(item) - {"marker", "name"}:
            raise PolicyError(key, f"each rule needs 'marker' and/or 'name' only, got {item!r}")
        if not all(isinstance(x, str) and x for x in item.values()):
            raise PolicyError(key, f"rule values must be non-empty strings, got {item!r}")
        rules.append(ProtectedRule(marker=item.get("marker"), name=item.get("name")))
    return tuple(rules)


def _models(key: str, v: Any) -> dict[str, Any]:
    """Model -> its window (an int), or a mapping of its window (``context_window`` or
    ``window``), prices (``PRICE_FIELDS``, dollars per million tokens) and ``reasoning_bound``,
    each optional; normalized to the window alone when nothing else is set."""
    if not isinstance(v, dict):
        raise PolicyError(key, f"expected a mapping of model name to window, got {v!r}")
    out: dict[str, Any] = {}
    for name, spec in v.items():
        if not isinstance(spec, dict):
            out[str(name)] = _int_min(1)(f"{key}.{name}.context_window", spec)
            continue
        unknown = set(spec) - {*WINDOW_FIELDS, *PRICE_FIELDS, BOUND_FIELD}
        if unknown or not spec:
            raise PolicyError(f"{key}.{name}", f"expected context_window and/or "
                              f"{', '.join([*PRICE_FIELDS, BOUND_FIELD])}, "
                              f"got {sorted(unknown) or spec!r}")
        entry: dict[str, Any] = {k: _price(f"{key}.{name}.{k}", spec[k])
                                 for k in PRICE_FIELDS if k in spec}
        if BOUND_FIELD in spec:
            entry[BOUND_FIELD] = _bool(f"{key}.{name}.{BOUND_FIELD}", spec[BOUND_FIELD])
        window = spec.get("context_window", spec.get("window"))
        if window is not None or not entry:
            entry["context_window"] = _int_min(1)(f"{key}.{name}.context_window", window)
        out[str(name)] = entry if set(entry) != {"context_window"} else entry["context_window"]
    return out


def _price(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e6:
        raise PolicyError(key, f"expected dollars per million tokens (a number >= 0), got {v!r}")
    return float(v)


def _split_models(models: Mapping[str, Any]
                  ) -> tuple[dict[str, int], dict[str, ModelPrices], dict[str, bool]]:
    """A validated ``models`` table as windows, prices and reasoning-bound overrides."""
    windows: dict[str, int] = {}
    prices: dict[str, ModelPrices] = {}
    bound: dict[str, bool] = {}
    for name, entry in models.items():
        if not isinstance(entry, Mapping):
            windows[name] = entry
            continue
        if "context_window" in entry:
            windows[name] = entry["context_window"]
        if BOUND_FIELD in entry:
            bound[name] = entry[BOUND_FIELD]
        if any(k in entry for k in PRICE_FIELDS):
            prices[name] = ModelPrices(**{k: entry[k] for k in PRICE_FIELDS if k in entry})
    return windows, prices, bound


@dataclass(frozen=True)
class FieldSpec:
    """One policy field: its dotted name, default, checker and whether bounds apply to it."""

    name: str
    default: Any
    check: Callable[[str, Any], Any]
    numeric: bool = False


_D = Policy()
FIELDS: dict[str, FieldSpec] = {
    f.name: f
    for f in [
        FieldSpec("masking.enabled", _D.masking.enabled, _bool),
        FieldSpec("masking.trigger_ratio", _D.masking.trigger_ratio, _ratio, True),
        FieldSpec("masking.keep_recent", _D.masking.keep_recent, _int_min(0), True),
        FieldSpec("masking.exclude_tools", _D.masking.exclude_tools, _str_list),
        FieldSpec("masking.in_steps", _D.masking.in_steps, _bool),
        FieldSpec("masking.min_free_ratio", _D.masking.min_free_ratio, _share, True),
        FieldSpec("masking.priced", _D.masking.priced, _bool),
        FieldSpec("masking.clear_tool_inputs", _D.masking.clear_tool_inputs, _bool),
        FieldSpec("masking.min_input_tokens", _D.masking.min_input_tokens, _int_min(0), True),
        FieldSpec("masking.spill_retention", _D.masking.spill_retention, _retention, True),
        FieldSpec("compaction.enabled", _D.compaction.enabled, _bool),
        FieldSpec("compaction.trigger_ratio", _D.compaction.trigger_ratio, _ratio, True),
        FieldSpec("compaction.keep_ratio", _D.compaction.keep_ratio, _ratio, True),
        FieldSpec("compaction.summary_ratio", _D.compaction.summary_ratio, _ratio, True),
        FieldSpec("compaction.summary_max_tokens", _D.compaction.summary_max_tokens,
                  _int_min(16), True),
        FieldSpec("compaction.summary_model", _D.compaction.summary_model, _opt_str),
        FieldSpec("compaction.summary_timeout_s", _D.compaction.summary_timeout_s,
                  _pos_float, True),
        FieldSpec("compaction.protect_first_user", _D.compaction.protect_first_user, _bool),
        FieldSpec("compaction.pinned_tools", _D.compaction.pinned_tools, _str_list),
        FieldSpec("compaction.protected", _D.compaction.protected, _protected),
        FieldSpec("compaction.summary_role", _D.compaction.summary_role, _one_of(*_ROLES)),
        FieldSpec("compaction.prepare_ratio", _D.compaction.prepare_ratio, _ratio, True),
        FieldSpec("rerank.enabled", _D.rerank.enabled, _bool),
        FieldSpec("rerank.keep", _D.rerank.keep, _int_min(1), True),
        FieldSpec("rerank.candidates", _D.rerank.candidates, _int_min(2), True),
        FieldSpec("rerank.model", _D.rerank.model, _opt_str),
        FieldSpec("rerank.timeout_ms", _D.rerank.timeout_ms, _int_min(1), True),
        FieldSpec("models", dict(_D.models), _models),
        FieldSpec("fallback_window", _D.fallback_window, _int_min(1), True),
        FieldSpec("mode", _D.mode, _one_of(*MODES)),
    ]
}


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a mistyped ``name``; "" when none
    is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_field(key: str) -> str:
    """The message for a policy field that does not exist, with the closest that does."""
    return f"unknown policy field{did_you_mean(key, FIELDS)}"


def validate_layer(flat: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """Check every field of one layer; return the normalized values.

    Raises ``PolicyError`` naming the first unknown field (with the closest known one) or bad
    value; ``where`` (e.g. the YAML file's path) is added to the message when given, for
    callers that do not name it themselves.
    """
    out: dict[str, Any] = {}
    for key, value in flat.items():
        try:
            out[key] = check_field(key, value)
        except PolicyError as e:
            raise PolicyError(key, e.message + (f" (in {where})" if where else "")) from None
    return out


def check_field(key: str, value: Any) -> Any:
    """One field's normalized value; ``PolicyError`` for an unknown field or a bad value."""
    spec = FIELDS.get(key)
    if spec is None:
        raise PolicyError(key, unknown_field(key))
    return spec.check(key, value)


def _in(where: str | None) -> str:
    return f" in {where}" if where else ""


_TOP = ("models", "fallback_window", "mode")  # the fields outside a section


def flatten(nested: Mapping[str, Any], where: str | None = "policy") -> dict[str, Any]:
    """Turn ``{masking: {enabled: false}}`` into ``{"masking.enabled": False}`` (unvalidated).

    ``models`` stays a single field; section names must be mappings.
    """
    if not isinstance(nested, Mapping):
        raise PolicyError("policy", f"expected a mapping{_in(where)}, got {nested!r}")
    flat: dict[str, Any] = {}
    for section, value in nested.items():
        if section in _TOP:
            flat[section] = value
        elif section in ("masking", "compaction", "rerank"):
            if not isinstance(value, Mapping):
                raise PolicyError(section, f"expected a mapping{_in(where)}, got {value!r}")
            for name, v in value.items():
                flat[f"{section}.{name}"] = v
        else:
            raise PolicyError(str(section), f"unknown policy section{_in(where)}"
                              + did_you_mean(str(section), ("masking", "compaction", "rerank",
                                                            *_TOP)))
    return flat


def build_policy(*layers: Mapping[str, Any]) -> Policy:
    """Overlay validated flat layers (lowest first) on the defaults and build a ``Policy``."""
    merged: dict[str, Any] = {k: s.default for k, s in FIELDS.items()}
    for layer in layers:
        merged.update(layer)
    sections: dict[str, dict[str, Any]] = {"masking": {}, "compaction": {}, "rerank": {}}
    windows, prices, bound = _split_models(merged["models"])
    for key, value in merged.items():
        if "." in key:
            section, name = key.split(".", 1)
            sections[section][name] = value
    return Policy(
        masking=MaskingPolicy(**sections["masking"]),
        compaction=CompactionPolicy(**sections["compaction"]),
        rerank=RerankPolicy(**sections["rerank"]),
        models=windows,
        fallback_window=merged["fallback_window"],
        prices=prices,
        bound=bound,
        mode=merged["mode"],
    )

