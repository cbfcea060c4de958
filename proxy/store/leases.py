"""Leases: a named claim that one process holds until it releases it or the lease runs out.

Replicas on one PostgreSQL database use them for what must happen once across all of them: the
compaction of one conversation's prefix (``proxy.context.records.flights``) and the background jobs
(``run_once``). A holder that dies (SIGKILL, a lost machine) blocks nobody beyond its lease.
Expiry is judged by the claimant's clock: replicas' clocks must agree to well within a lease
(NTP does). On SQLite (one process) the same rows work; they are simply never contended.
"""

from __future__ import annotations

import os
import secrets
import socket
import time

from proxy.store import Store, Tx

_CLAIM = ("INSERT INTO leases (name, owner, expires_at) VALUES (?, ?, ?) "
          "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, "
          "expires_at = excluded.expires_at "
          "WHERE leases.expires_at <= ? OR leases.owner = excluded.owner")


def process_owner() -> str:
    """This process's name as a lease holder: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


OWNER = process_owner()


def claim(tx: Tx, name: str, lease_s: float, owner: str = OWNER) -> bool:
    """Take (or extend) the lease ``name`` for ``lease_s`` seconds: True unless another owner
    holds it unexpired. Runs in the caller's write transaction."""
    now = time.time()
    return int(tx.execute(_CLAIM, [name, owner, now + lease_s, now]).rowcount) > 0


def renew(tx: Tx, name: str, lease_s: float, owner: str = OWNER) -> bool:
    """Extend a lease this owner holds; False when it has lost it (it expired and was taken)."""
    cur = tx.execute("UPDATE leases SET expires_at = ? WHERE name = ? AND owner = ?",
                     [time.time() + lease_s, name, owner])
    return int(cur.rowcount) > 0


def release(tx: Tx, name: str, owner: str = OWNER) -> None:
    tx.execute("DELETE FROM leases WHERE name = ? AND owner = ?", [name, owner])


def held(store: Store, name: str) -> bool:
    """Whether some owner holds ``name`` unexpired now (one indexed read)."""
    return store.read_one("SELECT 1 FROM leases WHERE name = ? AND expires_at > ?",
                          [name, time.time()]) is not None


def release_others(tx: Tx, owner: str = OWNER) -> int:
    """Drop every lease another owner holds: at the start of the one process a SQLite store
    has, those were left by an earlier process (a restart, a crash), which can hold nothing
    any longer; requests must not wait for them to run out."""
    return int(tx.execute("DELETE FROM leases WHERE owner <> ?", [owner]).rowcount)


def purge_expired(tx: Tx) -> int:
    """Drop leases past their expiry (left by holders that died)."""
    return int(tx.execute("DELETE FROM leases WHERE expires_at <= ?", [time.time()]).rowcount)


async def run_once(store: Store, job: str, period_s: float, owner: str = OWNER) -> bool:
    """Whether this process runs ``job`` for the period starting now: the first replica to ask
    takes the job's lease for ``period_s`` (a little less, so that the next period's first tick
    finds it expired) and the others are told no until it runs out."""
    return await store.write(claim, f"job {job}", period_s * 0.9, owner)
