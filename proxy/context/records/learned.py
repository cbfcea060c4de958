"""Learned windows shared through the store: a context limit that the upstream stated when it
refused a request as too long, learned by one replica, caps the model's window on all of them
(each would otherwise pay the refused request and its retry once to learn it itself).

The table is tiny (one row per model that was ever refused) and read whole at most every
``REFRESH_S``, so a request pays a dictionary lookup.
"""

from __future__ import annotations

import contextlib
import enum
import time

from proxy.store import Store, StoreUnavailable, Tx

REFRESH_S = 1.0


class Stale(enum.Enum):
    """The last read is too old to answer without reading again."""

    STALE = "stale"


STALE = Stale.STALE
# A stored limit counts for a day: an upstream whose limit grew (a model upgrade) is trusted
# again, and refuses once more if it did not.
TTL_S = 86_400.0


class LearnedWindows:
    def __init__(self, store: Store, refresh_s: float = REFRESH_S, ttl_s: float = TTL_S) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.ttl_s = ttl_s
        self._rows: dict[str, int] = {}
        self._read_at = float("-inf")

    def known(self, model: str) -> int | Stale | None:
        """``get`` without waiting: the last read's answer while it is fresh, else ``STALE``."""
        if time.monotonic() - self._read_at >= self.refresh_s:
            return STALE
        return self._rows.get(model)

    async def get(self, model: str) -> int | None:
        """The lowest limit any process learned for ``model``, read fresh (off the event
        loop) at most every ``refresh_s``; while the store is unreachable, the last read."""
        now = time.monotonic()
        if now - self._read_at >= self.refresh_s:
            self._read_at = now
            try:
                rows = await self.store.run(
                    self.store.read, "SELECT model, tokens FROM learned_windows "
                    "WHERE learned_at > ?", [time.time() - self.ttl_s])
                self._rows = {str(r[0]): int(r[1]) for r in rows}
            except StoreUnavailable:
                pass
        return self._rows.get(model)

    async def save(self, model: str, tokens: int) -> None:
        """Store ``tokens`` as ``model``'s learned limit unless a lower one is in force."""
        now = time.time()

        def write(tx: Tx) -> None:
            tx.execute("INSERT INTO learned_windows (model, tokens, learned_at) VALUES (?, ?, ?) "
                       "ON CONFLICT(model) DO UPDATE SET tokens = excluded.tokens, "
                       "learned_at = excluded.learned_at "
                       "WHERE excluded.tokens < learned_windows.tokens "
                       "OR learned_windows.learned_at <= ?",
                       [model, tokens, now, now - self.ttl_s])

        self._rows[model] = min(tokens, self._rows.get(model, tokens))
        # Unreachable store: this process knows; the others learn it from their own refusals.
        with contextlib.suppress(StoreUnavailable):
            await self.store.write(write)
