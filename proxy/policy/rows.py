"""Organization and user policy layers in SQLite (table ``policy_layers``, migration 002).

One row per layer: ``user = ''`` is the organization layer, any other value a user layer;
``fields`` is a JSON object of dotted field name to value (only the fields that layer sets).
Every change also bumps the ``policy_version`` row of table ``meta`` (created on first write) in
the same transaction, so a running server notices changes made by any process (the CLI) with one
cheap read, and reloads.

These functions are synchronous and open their own connection: the server runs them on the
store's writer thread (``Store.write``) or in a worker thread, the CLI calls them directly.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.policy.model import FIELDS, PolicyError, ProtectedRule

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


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def read_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE name = 'policy_version'").fetchone()
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
        spec = FIELDS.get(key)
        try:
            if spec is None:
                raise PolicyError(key, "unknown policy field")
            out[key] = spec.check(key, value)
        except PolicyError as e:
            log.warning("policy layer org=%r user=%r: stored field %r ignored: %s", org, user,
                        key, e.message)
    return out


def load_snapshot(path: Path) -> Snapshot:
    """Read every layer and the version in one read transaction (so they agree)."""
    conn = connect(path)
    try:
        conn.execute("BEGIN")
        version = read_version(conn)
        rows = conn.execute("SELECT org, user, fields FROM policy_layers").fetchall()
        conn.execute("COMMIT")
    finally:
        conn.close()
    return Snapshot(version, {(o, u or ""): parse_fields(f, o, u or "") for o, u, f in rows})


def load_layers(path: Path, org: str, user: str | None) -> dict[LayerKey, dict[str, Any]]:
    """The organization layer and, when ``user`` is given, that user's layer (CLI reads)."""
    conn = connect(path)
    try:
        rows = conn.execute("SELECT org, user, fields FROM policy_layers WHERE org = ? AND "
                            "user IN ('', ?)", [org, user or ""]).fetchall()
    finally:
        conn.close()
    return {(o, u): parse_fields(f, o, u) for o, u, f in rows}


@dataclass(frozen=True)
class WriteResult:
    """The layer as stored after the write, and the version before and after it."""

    fields: dict[str, Any]
    old_version: int
    new_version: int


def _bump(conn: sqlite3.Connection) -> tuple[int, int]:
    old = read_version(conn)
    conn.execute("INSERT INTO meta (name, value) VALUES ('policy_version', ?) "
                 "ON CONFLICT(name) DO UPDATE SET value = excluded.value", [old + 1])
    return old, old + 1


@contextmanager
def _immediate(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection in a ``BEGIN IMMEDIATE`` transaction (read-modify-write with no other
    writer in between), committed on success and rolled back on any error."""
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def write_layer(path: Path, org: str, user: str | None, patch: Mapping[str, Any]) -> WriteResult:
    """Merge a validated ``patch`` into one layer atomically; a ``None`` value unsets the field.

    An emptied layer's row is deleted. The caller has already checked names, locks and values.
    """
    with _immediate(path) as conn:
        row = conn.execute("SELECT fields FROM policy_layers WHERE org = ? AND user = ?",
                           [org, user or ""]).fetchone()
        current = parse_fields(row[0], org, user or "") if row else {}
        for key, value in patch.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        _store_row(conn, org, user or "", current)
        old, new = _bump(conn)
    return WriteResult(current, old, new)


def clear_layer(path: Path, org: str, user: str | None) -> WriteResult:
    """Delete one layer ("use the platform default"); clearing an absent layer is a no-op write."""
    with _immediate(path) as conn:
        conn.execute("DELETE FROM policy_layers WHERE org = ? AND user = ?", [org, user or ""])
        old, new = _bump(conn)
    return WriteResult({}, old, new)


def _store_row(conn: sqlite3.Connection, org: str, user: str, fields: dict[str, Any]) -> None:
    if not fields:
        conn.execute("DELETE FROM policy_layers WHERE org = ? AND user = ?", [org, user])
        return
    conn.execute(
        "INSERT INTO policy_layers (org, user, fields, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(org, user) DO UPDATE SET fields = excluded.fields, "
        "updated_at = excluded.updated_at",
        [org, user, json.dumps(to_json(fields), sort_keys=True), time.time()])


def key_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Active keys per organization (counts only: never a key or a hash)."""
    rows = conn.execute("SELECT org, COUNT(*) FROM keys WHERE revoked_at IS NULL GROUP BY org")
    return {str(org): int(n) for org, n in rows.fetchall()}
