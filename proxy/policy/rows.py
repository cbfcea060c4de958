"""Organization and user policy layers in the store (table ``policy_layers``, migration 002).

One row per layer: ``user = ''`` is the organization layer, any other value a user layer;
``fields`` is a JSON object of dotted field name to value (only the fields that layer sets).
Every change also bumps the ``policy_version`` row of table ``meta`` (created on first write) in
the same transaction, so a running server notices changes made by any process (the CLI) with one
cheap read, and reloads.

These functions take an open transaction (``Tx``) and are synchronous: the server runs them
through ``Store.write`` (the writer thread) or ``Store.snapshot`` in a worker thread, the CLI
through ``Store.atomic`` and ``Store.snapshot``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.model import PolicyError, ProtectedRule, check_field
from proxy.store.base import Tx

log = logging.getLogger("context_proxy.policy")

LayerKey = tuple[str, str]  # (org, user); user '' is the organization layer


def to_json(value: Any) -> Any:
    """A policy value as JSON: tuples become lists, protected rules ``{marker, name}`` objects
    (without the unset one)."""
    if isinstance(value, ProtectedRule):
        return {k: v for k, v in (("marker", value.marker), ("name", value.name)) if v is not None}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Snapshot:
    """Every stored layer (validated, flat) as of ``version``."""

    version: int
    layers: dict[LayerKey, dict[str, Any]]


def read_version(tx: Tx) -> int:
    row = tx.execute("SELECT value FROM meta WHERE name = 'policy_version'").fetchone()
    return int(row[0]) if row else 0


def parse_fields(raw: str, org: str, user: str) -> dict[str, Any]:
    """Validate a stored row field by field. A field that no longer validates (a renamed field, a
    hand-edited row) is dropped with a warning rather than taking the whole layer down."""
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        log.warning("policy layer org=%r user=%r: stored fields are not a JSON object; ignored",
                    org, user)
        return {}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        try:
            out[key] = check_field(key, value)
        except PolicyError as e:
            log.warning("policy layer org=%r user=%r: stored field %r ignored: %s", org, user,
                        key, e.message)
    return out


def load_snapshot(tx: Tx) -> Snapshot:
    """Every layer and the version; run it in ``Store.snapshot`` so that they agree."""
    version = read_version(tx)
    rows = tx.execute('SELECT org, "user", fields FROM policy_layers').fetchall()
    return Snapshot(version, {(o, u or ""): parse_fields(f, o, u or "") for o, u, f in rows})


def load_layers(tx: Tx, org: str, user: str | None) -> dict[LayerKey, dict[str, Any]]:
    """The organization layer and, when ``user`` is given, that user's layer (CLI reads)."""
    rows = tx.execute('SELECT org, "user", fields FROM policy_layers WHERE org = ? AND '
                      '"user" IN (\'\', ?)', [org, user or ""]).fetchall()
    return {(o, u): parse_fields(f, o, u) for o, u, f in rows}


@dataclass(frozen=True)
class WriteResult:
    """The layer as stored after the write, and the version before and after it."""

    fields: dict[str, Any]
    old_version: int
    new_version: int


def _bump(tx: Tx) -> tuple[int, int]:
    old = read_version(tx)
    tx.execute("INSERT INTO meta (name, value) VALUES ('policy_version', ?) "
               "ON CONFLICT(name) DO UPDATE SET value = excluded.value", [old + 1])
    return old, old + 1


def write_layer(tx: Tx, org: str, user: str | None, patch: Mapping[str, Any]) -> WriteResult:
    """Merge a validated ``patch`` into one layer atomically (run it in ``Store.atomic`` or
    ``Store.write``); a ``None`` value unsets the field.

    An emptied layer's row is deleted. The caller has already checked names, locks and values.
    """
    tx.lock("policy layers")  # read-modify-write: no other writer in between, on any replica
    row = tx.execute('SELECT fields FROM policy_layers WHERE org = ? AND "user" = ?',
                     [org, user or ""]).fetchone()
    current = parse_fields(row[0], org, user or "") if row else {}
    for key, value in patch.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    _store_row(tx, org, user or "", current)
    old, new = _bump(tx)
    return WriteResult(current, old, new)


def clear_layer(tx: Tx, org: str, user: str | None) -> WriteResult:
    """Delete one layer ("use the platform default"); clearing an absent layer is a no-op write."""
    tx.lock("policy layers")
    tx.execute('DELETE FROM policy_layers WHERE org = ? AND "user" = ?', [org, user or ""])
    old, new = _bump(tx)
    return WriteResult({}, old, new)


def _store_row(tx: Tx, org: str, user: str, fields: dict[str, Any]) -> None:
    if not fields:
        tx.execute('DELETE FROM policy_layers WHERE org = ? AND "user" = ?', [org, user])
        return
    tx.execute(
        'INSERT INTO policy_layers (org, "user", fields, updated_at) VALUES (?, ?, ?, ?) '
        'ON CONFLICT(org, "user") DO UPDATE SET fields = excluded.fields, '
        "updated_at = excluded.updated_at",
        [org, user, json.dumps(to_json(fields), sort_keys=True), time.time()])

