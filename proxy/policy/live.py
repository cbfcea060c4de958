"""The live policy: the platform config, every stored layer in memory, resolved policies.

``PolicyService.resolve(org, user)`` is the request path's entry: a dictionary hit, never a
database read. The cache is invalidated by admin writes (at once), by writes of other processes
(``refresh``, polled every 0.25 s by ``proxy.policy.watch``) and by YAML reloads
(``set_platform``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from proxy.policy.layers import (
    check_clear,
    check_write,
    effective_policy,
    field_states,
    pick_layers,
    view_json,
)
from proxy.policy.model import Policy
from proxy.policy.platform import PlatformConfig
from proxy.policy.rows import (
    LayerKey,
    Snapshot,
    WriteResult,
    clear_layer,
    load_snapshot,
    write_layer,
)

if TYPE_CHECKING:
    from proxy.store import Store

_MAX_CACHED = 200_000  # (org, user) pairs; far above any real deployment, bounds a bad actor


class PolicyService:
    """The live policy: platform config + every stored layer in memory + resolved policies."""

    def __init__(self, platform: PlatformConfig, store: Store | None = None) -> None:
        self.platform = platform
        self._store: Store | None = None
        self._stored: dict[LayerKey, dict[str, Any]] = {}
        self._version = 0  # policy_version of the layers held in memory
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
        self._apply(store.snapshot(load_snapshot))

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
        indexed read (the ``meta`` versions) when nothing changed."""
        store = self._store
        if store is None:
            return False
        versions = await store.run(store.versions)
        if not self._stale and versions["policy_version"] == self._version:
            return False
        async with self._lock:
            self._apply(await store.run(store.snapshot, load_snapshot))
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
            result = await store.write(write_layer, org, user, patch)
            self._apply_write(org, user, result)
        return self.view(org, user)

    async def clear(self, org: str, user: str | None) -> dict[str, Any]:
        """Clear a layer ("use the platform default"); the new view."""
        check_clear(self.platform, org, user)
        store = self._require_store()
        async with self._lock:
            result = await store.write(clear_layer, org, user)
            self._apply_write(org, user, result)
        return self.view(org, user)
