"""Policy resolution: platform → organization → user, with locks and bounds (SPEC section 7).

Rules (pure functions, shared by the server, the admin API and the CLI):

- Each layer replaces only the fields it sets; the platform layer is ``PlatformConfig.defaults``
  over the embedded defaults.
- A locked field (``PlatformConfig.locks``) takes the platform's value: a value an organization
  or user layer holds for it (stored before the lock was set) is ignored, not clamped, and shown
  with ``ignored: true``. Writes of a locked field are refused (409).
- Bounds clamp the value after layering, at read time; the stored row keeps what was saved.
- An organization declared in YAML (``PlatformConfig.orgs``) takes its layers from YAML only;
  its stored rows, if any, are ignored, and API/CLI writes to it are refused (409).

``PolicyService.resolve(org, user)`` is the request path's entry: a dictionary hit, never a
database read. The cache is invalidated by admin writes (at once), by writes of other processes
(``refresh``, polled every 0.25 s by ``proxy.policy_watch``) and by YAML reloads
(``set_platform``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from proxy.config import PlatformConfig
from proxy.policy import FIELDS, Policy, PolicyError, build_policy
from proxy.policy_db import (
    LayerKey,
    Snapshot,
    WriteResult,
    clear_layer,
    load_snapshot,
    read_version,
    to_json,
    write_layer,
)

if TYPE_CHECKING:
    from proxy.store import Store

EMPTY: Mapping[str, Any] = MappingProxyType({})
_MAX_CACHED = 200_000  # (org, user) pairs; far above any real deployment, bounds a bad actor


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
            raise LayerWriteError(400, f"Unknown policy field '{name}'.", str(name),
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


class PolicyService:
    """The live policy: platform config + every stored layer in memory + resolved policies."""

    def __init__(self, platform: PlatformConfig, store: Store | None = None) -> None:
        self.platform = platform
        self._store: Store | None = None
        self._stored: dict[LayerKey, dict[str, Any]] = {}
        self._version = 0  # policy_version of the layers held in memory
        self._data_version = -1
        self._stale = False  # a write of another process slipped in: reload on next refresh
        self._cache: dict[str, dict[str | None, Policy]] = {}
        self._cached = 0
        self._lock = asyncio.Lock()  # one reload or write at a time, so versions stay ordered
        if store is not None:
            self.attach(store)

    # --- the request path ---------------------------------------------------------------------

    def resolve(self, org: str, user: str | None = None) -> Policy:
        """The effective policy for a caller: a dictionary hit once computed."""
        users = self._cache.get(org)
        if users is not None:
            policy = users.get(user)
            if policy is not None:
                return policy
        org_layer, user_layer = pick_layers(self.platform, self._stored, org, user)
        policy = effective_policy(self.platform, org_layer, user_layer)
        if self._cached >= _MAX_CACHED:
            self._cache, self._cached = {}, 0
        self._cache.setdefault(org, {})[user] = policy
        self._cached += 1
        return policy

    # --- views --------------------------------------------------------------------------------

    def managed_by(self, org: str) -> str:
        return "yaml" if org in self.platform.orgs else "api"

    def view(self, org: str, user: str | None = None) -> dict[str, Any]:
        """The effective view of an organization (or one of its users). An organization with no
        layer is valid: its view shows the platform values."""
        org_layer, user_layer = pick_layers(self.platform, self._stored, org, user)
        return {"org": org, "user": user, "managed_by": self.managed_by(org),
                "fields": view_json(field_states(self.platform, org_layer, user_layer))}

    def list_orgs(self, keys: Mapping[str, int]) -> list[dict[str, Any]]:
        """Organizations that are declared in YAML, have a stored layer or own an active key."""
        stored_users: dict[str, list[str]] = {}  # one pass: 1,000s of orgs stay cheap
        with_layer: set[str] = set()
        for org, user in self._stored:
            users = stored_users.setdefault(org, [])
            if user:
                users.append(user)
            else:
                with_layer.add(org)
        out = []
        for org in sorted(set(self.platform.orgs) | set(stored_users) | set(keys)):
            spec = self.platform.orgs.get(org)
            if spec is not None:
                has_layer, users = bool(spec.policy), sorted(spec.users)
            else:
                has_layer, users = org in with_layer, sorted(stored_users.get(org, []))
            out.append({"org": org, "managed_by": self.managed_by(org),
                        "file": self.platform.org_files.get(org), "org_layer": has_layer,
                        "users": users, "keys": keys.get(org, 0)})
        return out

    # --- changes ------------------------------------------------------------------------------

    def set_platform(self, platform: PlatformConfig) -> None:
        """Swap in a reloaded platform config; every resolved policy is recomputed on demand."""
        self.platform = platform
        self._cache, self._cached = {}, 0

    def attach(self, store: Store) -> None:
        """Load every stored layer (synchronously: startup, before serving)."""
        self._store = store
        self._data_version = store.data_version()
        self._apply(load_snapshot(store.path))

    def _apply(self, snap: Snapshot) -> None:
        self._stored, self._version, self._stale = snap.layers, snap.version, False
        self._cache, self._cached = {}, 0

    def _apply_write(self, org: str, user: str | None, result: WriteResult) -> None:
        key = (org, user or "")
        if result.fields:
            self._stored[key] = result.fields
        else:
            self._stored.pop(key, None)
        if result.old_version == self._version:
            self._version = result.new_version
        else:
            self._stale = True
        dropped = self._cache.pop(org, None)
        self._cached -= len(dropped or ())

    async def refresh(self) -> bool:
        """Reload the stored layers if any process changed them; True when reloaded. Costs one
        pragma when nothing was committed since the last call."""
        store = self._store
        if store is None:
            return False
        dv = store.data_version()
        if dv == self._data_version and not self._stale:
            return False
        self._data_version = dv
        if not self._stale and read_version(store.reader) == self._version:
            return False
        async with self._lock:
            self._apply(await asyncio.to_thread(load_snapshot, store.path))
        return True

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("PolicyService has no store attached")
        return self._store

    async def set_fields(self, org: str, user: str | None, body: Any) -> dict[str, Any]:
        """Validate and merge ``body`` into a layer (raises ``LayerWriteError``); the new view."""
        patch = check_write(self.platform, org, user, body)
        store = self._require_store()
        async with self._lock:
            result = await store.write(write_layer, store.path, org, user, patch)
            self._apply_write(org, user, result)
        return self.view(org, user)

    async def clear(self, org: str, user: str | None) -> dict[str, Any]:
        """Clear a layer ("use the platform default"); the new view."""
        check_clear(self.platform, org, user)
        store = self._require_store()
        async with self._lock:
            result = await store.write(clear_layer, store.path, org, user)
            self._apply_write(org, user, result)
        return self.view(org, user)
