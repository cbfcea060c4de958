"""A watchdog for PostgreSQL connections in use: the client-side deadline libpq lacks.

A statement sent into a partition that swallows bytes (or to a server that hangs) waits on its
socket forever when the far end still acknowledges at the TCP level (a proxy, a load balancer),
so neither keepalives nor ``tcp_user_timeout`` end it. The watchdog shuts down the socket of a
connection held longer than its limit: the blocked thread gets an ``OperationalError`` (retried
once, then ``StoreUnavailable``), the pool drops the broken connection, and no thread is lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("context_proxy.store")

HOLD_LIMIT_S = 5.0  # far above any unit of work the proxy runs (indexed reads, small writes)
PROBE_LIMIT_S = 1.5
TICK_S = 0.1


def cut(conn: Any) -> None:
    """Shut down ``conn``'s socket (a duplicate descriptor: libpq keeps and closes its own)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except Exception:  # already closed: nothing to cut
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


class Watchdog:
    def __init__(self) -> None:
        self._held: dict[int, tuple[Any, float]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.cuts = 0

    @contextmanager
    def watch(self, conn: Any, limit_s: float = HOLD_LIMIT_S) -> Iterator[None]:
        """Cut ``conn`` should the body hold it longer than ``limit_s``."""
        token = id(conn)
        with self._lock:
            self._held[token] = (conn, time.monotonic() + limit_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="store-watchdog",
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(token, None)

    def _run(self) -> None:
        while not self._stopped.wait(TICK_S):
            now = time.monotonic()
            with self._lock:
                late = [c for c, until in self._held.values() if until <= now]
                for conn in late:
                    self._held.pop(id(conn), None)
            for conn in late:
                self.cuts += 1
                log.debug("a database connection had no answer in time: cut")
                cut(conn)

    def stop(self) -> None:
        self._stopped.set()
