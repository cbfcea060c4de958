"""Policy resolution rules: platform -> organization -> user, with locks and bounds (SPEC 7).

Pure functions, shared by the server, the admin API and the CLI:

- Each layer replaces only the fields it sets; the platform layer is ``PlatformConfig.defaults``
  over the embedded defaults.
- A locked field (``PlatformConfig.locks``) takes the platform's value: a value an organization
  or user layer holds for it (stored before the lock was set) is ignored, not clamped, and shown
  with ``ignored: true``. Writes of a locked field are refused (409).
- Bounds clamp the value after layering, at read time; the stored row keeps what was saved.
- An organization declared in YAML (``PlatformConfig.orgs``) takes its layers from YAML only;
  its stored rows, if any, are ignored, and API/CLI writes to it are refused (409).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from proxy.policy.model import FIELDS, Policy, PolicyError, build_policy, did_you_mean
from proxy.policy.platform import PlatformConfig
from proxy.policy.rows import LayerKey, to_json

EMPTY: Mapping[str, Any] = MappingProxyType({})


class LayerWriteError(Exception):
    """A refused write: ``status`` 400 (bad name, field or value) or 409 (locked, YAML-managed);
    ``param`` names the field at fault when there is one."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str = "invalid_policy") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True)
class FieldState:
    """One field of the effective view. ``org``/``user`` are the stored values (``None``: that
    layer does not set the field)."""

    effective: Any
    platform: Any
    org: Any
    user: Any
    locked: bool
    clamped: bool
    ignored: bool


def _clamp(value: Any, bounds: tuple[Any, Any] | None) -> tuple[Any, bool]:
    if bounds is None:
        return value, False
    lo, hi = bounds
    if lo is not None and value < lo:
        return lo, True
    if hi is not None and value > hi:
        return hi, True
    return value, False


def field_states(platform: PlatformConfig, org_layer: Mapping[str, Any],
                 user_layer: Mapping[str, Any]) -> dict[str, FieldState]:
    """Every field, resolved by the rules in this module's docstring."""
    out: dict[str, FieldState] = {}
    for name, spec in FIELDS.items():
        base = platform.defaults.get(name, spec.default)
        locked = name in platform.locks
        value, ignored = base, False
        for layer in (org_layer, user_layer):
            if name in layer:
                if locked:
                    ignored = True
                else:
                    value = layer[name]
        value, clamped = _clamp(value, platform.bounds.get(name))
        out[name] = FieldState(value, base, org_layer.get(name), user_layer.get(name), locked,
                               clamped, ignored)
    return out


def effective_policy(platform: PlatformConfig, org_layer: Mapping[str, Any],
                     user_layer: Mapping[str, Any]) -> Policy:
    states = field_states(platform, org_layer, user_layer)
    return build_policy({name: s.effective for name, s in states.items()})


def view_json(states: Mapping[str, FieldState]) -> dict[str, Any]:
    """The effective view's ``fields`` object (SPEC section 7.1), JSON-ready."""
    return {name: {"effective": to_json(s.effective), "platform": to_json(s.platform),
                   "org": to_json(s.org), "user": to_json(s.user), "locked": s.locked,
                   "clamped": s.clamped, "ignored": s.ignored}
            for name, s in states.items()}


def pick_layers(platform: PlatformConfig, stored: Mapping[LayerKey, Mapping[str, Any]],
                org: str, user: str | None) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(organization layer, user layer): from YAML for a YAML-managed organization, else from
    the stored rows."""
    spec = platform.orgs.get(org)
    if spec is not None:
        return spec.policy, (spec.users.get(user, EMPTY) if user else EMPTY)
    return stored.get((org, ""), EMPTY), (stored.get((org, user), EMPTY) if user else EMPTY)


def check_name(kind: str, name: str) -> None:
    if not name or len(name) > 200 or any(ord(c) < 32 or c == "/" for c in name):
        raise LayerWriteError(400, f"Invalid {kind} name {name!r}: 1 to 200 printable "
                              "characters without '/'.", kind, "invalid_name")


def check_target(org: str, user: str | None) -> tuple[str, str | None]:
    """The organization (and user) a layer write or read names, or ``LayerWriteError``."""
    check_name("organization", org)
    if user is not None:
        check_name("user", user)
    return org, user


def check_write(platform: PlatformConfig, org: str, user: str | None,
                patch: Any) -> dict[str, Any]:
    """Validate a write to one layer; return the normalized patch (``None``: unset the field).

    Checked in order, nothing is written unless all pass: the body is a non-empty object (400);
    every name is a policy field (400 naming it); the organization is not YAML-managed (409);
    no field is locked (409 naming it; unsetting a locked field is allowed, it only removes an
    ignored value); every value is valid for its field (400 naming it).
    """
    check_name("organization", org)
    if user is not None:
        check_name("user", user)
    if not isinstance(patch, Mapping):
        raise LayerWriteError(400, "The body must be a JSON object of dotted policy field names "
                              'to values, e.g. {"compaction.trigger_ratio": 0.7}.')
    if not patch:
        raise LayerWriteError(400, "The body sets no field.")
    for name in patch:
        if name not in FIELDS:
            raise LayerWriteError(400, f"Unknown policy field '{name}'"
                                  f"{did_you_mean(str(name), FIELDS)}.", str(name),
                                  "unknown_field")
    if org in platform.orgs:
        raise LayerWriteError(409, f"Organization '{org}' is managed by YAML "
                              f"({platform.org_files.get(org, 'policies/')}); change it there.",
                              None, "managed_by_yaml")
    for name, value in patch.items():
        if name in platform.locks and value is not None:
            raise LayerWriteError(409, f"Field '{name}' is locked by the platform and cannot be "
                                  "set by an organization or user.", name, "field_locked")
    out: dict[str, Any] = {}
    for name, value in patch.items():
        try:
            out[name] = None if value is None else FIELDS[name].check(name, value)
        except PolicyError as e:
            raise LayerWriteError(400, f"Invalid value for '{name}': {e.message}.", name,
                                  "invalid_value") from None
    return out


def check_clear(platform: PlatformConfig, org: str, user: str | None) -> None:
    check_name("organization", org)
    if user is not None:
        check_name("user", user)
    if org in platform.orgs:
        raise LayerWriteError(409, f"Organization '{org}' is managed by YAML "
                              f"({platform.org_files.get(org, 'policies/')}); change it there.",
                              None, "managed_by_yaml")
