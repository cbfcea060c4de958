"""Console sign-outs in the store, so a signed-out cookie is refused by every replica and after
a restart (SPEC section 10).

Sign-out writes a row (the session's nonce and its expiry) and moves the ``signouts_version``
counter in ``meta``; rows past their expiry are purged by the same write. ``Refresher`` keeps
each process's in-memory set (``Sessions``) in step: every ``every_s`` it reads the counter
(one indexed read, in a worker thread: never on the event loop) and, when it moved, the
unexpired rows. Checking a cookie reads memory only.
"""

from __future__ import annotations

import asyncio
import logging
import time

from proxy.console.session import Session, Sessions
from proxy.store import Store, Tx

log = logging.getLogger("context_proxy")
VERSION = "signouts_version"
REFRESH_S = 0.5  # a sign-out reaches every replica within this (plus one read)


def record(tx: Tx, nonce: str, expires_at: int) -> None:
    """Write one sign-out and drop the rows of sessions that have expired anyway."""
    tx.execute("INSERT INTO console_signouts (nonce, expires_at) VALUES (?, ?) "
               "ON CONFLICT DO NOTHING", [nonce, expires_at])
    purge_expired(tx)
    tx.execute("UPDATE meta SET value = value + 1 WHERE name = ?", [VERSION])


def purge_expired(tx: Tx) -> int:
    return int(tx.execute("DELETE FROM console_signouts WHERE expires_at <= ?",
                          [time.time()]).rowcount)


def _load(tx: Tx) -> tuple[int, dict[str, int]]:
    row = tx.execute("SELECT value FROM meta WHERE name = ?", [VERSION]).fetchone()
    rows = tx.execute("SELECT nonce, expires_at FROM console_signouts WHERE expires_at > ?",
                      [time.time()]).fetchall()
    return (int(row[0]) if row else 0), {str(r[0]): int(r[1]) for r in rows}


class Refresher:
    """Keeps ``sessions``' signed-out set in step with the store."""

    def __init__(self, store: Store, sessions: Sessions, every_s: float = REFRESH_S) -> None:
        self.store = store
        self.sessions = sessions
        self.every_s = every_s
        self.version: int | None = None
        self._failing = False

    async def refresh(self) -> None:
        """One step: read the counter; when it moved, adopt the stored sign-outs."""
        row = await self.store.run(self.store.read_one,
                                   "SELECT value FROM meta WHERE name = ?", [VERSION])
        if row is not None and int(row[0]) == self.version:
            return
        version, revoked = await self.store.run(self.store.snapshot, _load)
        self.sessions.adopt(revoked)
        self.version = version

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.refresh()
                if self._failing:
                    log.info("console sign-outs are read from the store again")
                self._failing = False
            except Exception as e:
                if not self._failing:  # one line per outage, not one per second
                    log.warning("reading console sign-outs from the store failed (%s); the "
                                "last ones read are kept", type(e).__name__)
                self._failing = True

    async def sign_out(self, session: Session) -> None:
        """Record the sign-out in the store (raises ``StoreUnavailable`` when it cannot be),
        then refuse the session here at once."""
        await self.store.write(record, session.nonce, session.expires_at)
        self.sessions.end(session)
