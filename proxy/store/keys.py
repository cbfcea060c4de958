"""API keys in the store (table ``keys``, migration 001): issued, bound, listed, revoked, found.

A key is stored only as its SHA-256 (``hash_key``); the plaintext of an issued key is returned
once and never kept. Every write also moves the ``keys_version`` row of table ``meta`` in the
same transaction, and marks its key with the new version (``changed_version``, migration 013),
so every process (the server's key cache, ``proxy.auth``) notices a change made by any other
(the CLI, another replica) with one indexed read, and reads only the keys changed since.

``Keys`` methods block (the CLI, worker threads); the server reaches them through
``Store.run``. ``key_counts`` takes an open transaction, for ``Store.snapshot``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.store.base import Tx

if TYPE_CHECKING:
    from proxy.store import Store


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyRecord:
    id: str
    org: str
    user: str | None
    kind: str  # "proxy" (issued here) or "bound" (a passthrough key's hash bound to an org)
    created_at: float
    revoked_at: float | None


def _record(row: Any) -> KeyRecord:
    return KeyRecord(row["id"], row["org"], row["user"], row["kind"], row["created_at"],
                     row["revoked_at"])


def _bump_version(tx: Tx, key_id: str) -> None:
    """Move ``keys_version`` on, and mark key ``key_id`` as changed at the new version."""
    tx.execute("UPDATE meta SET value = value + 1 WHERE name = 'keys_version'")
    tx.execute("UPDATE keys SET changed_version = (SELECT value FROM meta "
               "WHERE name = 'keys_version') WHERE id = ?", [key_id])


def key_counts(tx: Tx) -> dict[str, int]:
    """Active keys per organization (counts only: never a key or a hash)."""
    rows = tx.execute("SELECT org, COUNT(*) FROM keys WHERE revoked_at IS NULL GROUP BY org")
    return {str(org): int(n) for org, n in rows.fetchall()}


class Keys:
    """The keys of one store. ``writes`` counts this process's key writes, so the key cache of
    the same process looks again at once rather than at its next periodic check."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes = 0

    def create(self, org: str, user: str | None = None) -> tuple[KeyRecord, str]:
        """Issue a proxy key; returns the record and the plaintext, which is never stored."""
        plaintext = "cp-" + secrets.token_urlsafe(32)
        return self._insert(plaintext, org, user, "proxy"), plaintext

    def bind(self, plaintext: str, org: str, user: str | None = None) -> KeyRecord:
        """Bind a client's own (passthrough) key, by hash, to an organization."""
        return self._insert(plaintext, org, user, "bound")

    def _insert(self, plaintext: str, org: str, user: str | None, kind: str) -> KeyRecord:
        rec = KeyRecord("key_" + secrets.token_hex(6), org, user, kind, time.time(), None)

        def insert(tx: Tx) -> None:
            tx.execute('INSERT INTO keys (id, key_hash, org, "user", kind, created_at, '
                       'revoked_at) VALUES (?, ?, ?, ?, ?, ?, NULL)',
                       [rec.id, hash_key(plaintext), org, user, kind, rec.created_at])
            _bump_version(tx, rec.id)

        self.store.atomic(insert)
        self.writes += 1
        return rec

    def all(self) -> list[KeyRecord]:
        """Every key, revoked ones included, oldest first."""
        return [_record(r) for r in self.store.read("SELECT * FROM keys ORDER BY created_at")]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key by id; False when there is no such key or it was already revoked."""
        def revoke(tx: Tx) -> bool:
            cur = tx.execute("UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                             [time.time(), key_id])
            if cur.rowcount > 0:
                _bump_version(tx, key_id)
            return cur.rowcount > 0

        changed = self.store.atomic(revoke)
        self.writes += 1 if changed else 0
        return changed

    def find_many(self, key_hashes: list[str]) -> list[tuple[str, KeyRecord]]:
        """(hash, record) of each of ``key_hashes`` that is stored."""
        if not key_hashes:
            return []
        rows = self.store.read(f"SELECT * FROM keys WHERE key_hash IN "
                               f"({', '.join('?' * len(key_hashes))})", key_hashes)
        return [(r["key_hash"], _record(r)) for r in rows]

    def find(self, key_hash: str) -> KeyRecord | None:
        row = self.store.read_one("SELECT * FROM keys WHERE key_hash = ?", [key_hash])
        return _record(row) if row else None

    def version(self) -> int:
        """The ``keys_version`` counter: it moves on every key write, by any process."""
        return self.store.versions()["keys_version"]

    def changed_since(self, version: int) -> tuple[int, list[tuple[str, KeyRecord]]]:
        """The ``keys_version`` now and (hash, record) of every key written after ``version``,
        read together (one snapshot)."""
        def read(tx: Tx) -> tuple[int, list[tuple[str, KeyRecord]]]:
            row = tx.execute("SELECT value FROM meta WHERE name = 'keys_version'").fetchone()
            rows = tx.execute("SELECT * FROM keys WHERE changed_version > ?",
                              [version]).fetchall()
            return int(row[0]), [(r["key_hash"], _record(r)) for r in rows]

        return self.store.snapshot(read)
