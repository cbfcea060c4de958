"""The store: every piece of state (keys, policy layers, conversations, compactions, spills,
usage) behind one interface with two backends, SQLite (a file, the default) and PostgreSQL
(``CONTEXT_PROXY_DATABASE_URL``, shared by replicas), whose schema is the one migration list of
``proxy.store.schema``. The keys are ``Store.keys`` (``proxy.store.keys``).

Every statement the proxy runs goes through here: ``atomic(fn)`` runs ``fn(tx)`` in a write
transaction, ``snapshot(fn)`` is a consistent read, ``read``/``read_one`` are indexed reads;
all four block, for the CLI and worker threads. From async code the store is only reached
through ``run(fn)`` (any blocking ``fn`` on a reader thread) and ``write(fn)`` (``atomic`` on
the single writer thread), each under a deadline and the outage gate of
``proxy.store.health``: the event loop never waits on the database. A transient database error
(a dropped connection) is retried once; a second failure, a missed deadline or a store known
to be down raises ``StoreUnavailable``, answered as a 503 ``store_unavailable``. A call that
outlives its deadline makes the store suspect: it is waited for while a probe judges, failing
as soon as the store is found down, and answered if it is merely slow (within ``PATIENCE_S``
more). A request waits out one failed call at most: after it, its further calls (with the
default deadline) fail at once, and it goes on from memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from proxy.store.base import Backend, CommitUnknown, Params, StoreUnavailable, Tx
from proxy.store.health import StoreHealth
from proxy.store.keys import Keys
from proxy.store.schema import MIGRATIONS
from proxy.store.sqlite import SqliteBackend, migrate

__all__ = ["MIGRATIONS", "Store", "StoreUnavailable", "Tx", "begin_request", "migrate"]

T = TypeVar("T")
DEFAULT_POOL_SIZE = 10
# How long one store call may take before the store is suspect and a probe judges it
# (``deadline=DEFAULT`` below). Indexed reads and small writes take milliseconds; a partition is
# found within this plus the probe's verdict (``health.VERDICT_S``), so an unseen key gets its
# 503 within 1 s in an outage. A SQLite file does not partition: its deadline only guards
# against a stuck disk.
DEADLINES_S = {"postgres": 0.4, "sqlite": 3.0}
DEFAULT = -1.0
# A late call on a store the probe found alive (slow: a starved machine, a busy server) is
# waited for this much longer before it fails: refusing an unseen key then would turn a slow
# answer into a 503.
PATIENCE_S = 2.5
# Threads that run the writes of requests. SQLite takes one write at a time; PostgreSQL takes
# them side by side (rows and advisory locks keep them apart, as between replicas), and one
# thread would queue a burst of compactions' claims and dividers behind each other.
WRITERS = {"sqlite": 1, "postgres": 3}
VERSION_NAMES = ("keys_version", "policy_version")


class _Scope:
    """One request's dealings with the store (``begin_request``): whether one of its calls
    outlived its deadline. Bound to the request's task: a task the request spawns (background
    work) inherits the context but not the scope."""

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.late = False

    @property
    def mine(self) -> bool:
        return self.task is not None and self.task is asyncio.current_task()


_SCOPE: ContextVar[_Scope | None] = ContextVar("store_scope", default=None)


def begin_request() -> None:
    """Start a request's store scope (in the task that handles it): from the first of its
    calls that outlives its deadline on, its further calls with the default deadline fail at
    once, so the request waits out one deadline at most and goes on from memory."""
    _SCOPE.set(_Scope())


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def is_database_url(target: Path | str) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def _open_backend(target: Path | str, pool_size: int) -> Backend:
    if is_database_url(target):
        from proxy.store.postgres import PostgresBackend  # psycopg loads only when used

        return PostgresBackend(str(target), pool_size)
    return SqliteBackend(Path(target))


class Store:
    """Open (and migrate) the store at ``target``: a SQLite file path, or a ``postgresql://``
    URL. Synchronous methods are for the CLI and worker threads; ``write`` runs a transaction on
    the writer thread from async code."""

    def __init__(self, target: Path | str, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self.backend = _open_backend(target, pool_size)
        self.kind = self.backend.kind
        self.path: Path | None = target if isinstance(target, Path) else None
        if self.path is None and not is_database_url(target):
            self.path = Path(target)
        self._executor = ThreadPoolExecutor(max_workers=WRITERS.get(self.kind, 1),
                                            thread_name_prefix="store-writer")
        self._readers = ThreadPoolExecutor(max_workers=max(2, pool_size),
                                           thread_name_prefix="store-reader")
        self._aside = self._executor if self.kind == "sqlite" else ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-aside")
        self.health = StoreHealth(self.backend.probe)
        self.deadline_s = DEADLINES_S.get(self.kind, 1.0)
        self.keys = Keys(self)

    @property
    def up(self) -> bool:
        """False from a failed or late call until a probe finds the store answering again."""
        return self.health.up

    def _retry(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return self._twice(fn, *args)
        except CommitUnknown as e:  # perhaps committed: a repeat could apply it twice
            raise StoreUnavailable(f"{type(e.__cause__).__name__} at commit") from e

    def _twice(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self.backend.busy as e:  # every connection in use: slow, not unreachable
            raise StoreUnavailable(type(e).__name__, late=True) from e
        except self.backend.transient:
            self.backend.recover()
        try:
            return fn(*args)
        except self.backend.busy as e:
            raise StoreUnavailable(type(e).__name__, late=True) from e
        except self.backend.transient as e:
            raise StoreUnavailable(f"{type(e).__name__}") from e

    def _in_tx(self, fn: Callable[..., T], *args: Any) -> T:
        with self.backend.transaction() as tx:
            result: T = fn(tx, *args)
        return result

    def _in_snapshot(self, fn: Callable[..., T], *args: Any) -> T:
        with self.backend.snapshot() as tx:
            result: T = fn(tx, *args)
        return result

    def atomic(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(tx, *args)`` in one write transaction (committed, or rolled back on error)."""
        result: T = self._retry(self._in_tx, fn, *args)
        return result

    def snapshot(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(tx, *args)`` in one read transaction: everything it reads agrees."""
        result: T = self._retry(self._in_snapshot, fn, *args)
        return result

    async def _gated(self, executor: ThreadPoolExecutor, deadline: float | None,
                     fn: Callable[..., T], *args: Any, always: bool = False,
                     patience: float = PATIENCE_S) -> T:
        if not self.health.up:
            raise StoreUnavailable("the store is down")
        if deadline is not None and not always and self.late:
            raise StoreUnavailable("this request already waited out a store deadline")
        if deadline == DEFAULT:
            deadline = self.deadline_s
        job = executor.submit(self._unless_down, fn, *args)
        waiting: asyncio.Future[Any] = asyncio.wrap_future(job)
        waiting.add_done_callback(_consume)  # a late failure is the pending future's to tell
        gone: asyncio.Future[Any] = self.health.gone()
        await asyncio.wait({waiting, gone}, timeout=deadline,
                           return_when=asyncio.FIRST_COMPLETED)
        if not job.done() and not gone.done() and deadline is not None:
            # Suspect, not down: a probe judges meanwhile, and ``gone`` ends the wait at once
            # if it finds the store unreachable.
            self.health.late(f"no answer in {deadline} s")
            await asyncio.wait({waiting, gone}, timeout=patience,
                               return_when=asyncio.FIRST_COMPLETED)
        if not job.done():  # the thread goes on (it cannot be stopped); the loop does not wait
            self.late_here()
            raise StoreUnavailable("deadline", pending=job, late=True)
        try:  # done in its thread, if perhaps not yet seen by the loop (a loop slow to wake)
            result: T = job.result()
        except StoreUnavailable as e:
            if e.late:  # no pooled connection free in time: slow, perhaps not gone
                self.health.late(e.detail)
                self.late_here()
            else:
                self.health.failed(e.detail)
            raise
        self.health.answered()
        return result

    @property
    def late(self) -> bool:
        """Whether the current request already waited out a store deadline (``late_here``)."""
        scope = _SCOPE.get()
        return scope is not None and scope.late and scope.mine

    @staticmethod
    def late_here() -> None:
        """Mark the current request (``begin_request``) as one that waited out a store
        deadline: its further calls with the default deadline fail at once."""
        scope = _SCOPE.get()
        if scope is not None and scope.mine:
            scope.late = True

    def _unless_down(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, unless the store went down while it was queued
        there (behind calls a partition stalled): then it fails at once, like a new call."""
        if not self.health.up:
            raise StoreUnavailable("the store is down")
        return fn(*args)

    async def run(self, fn: Callable[..., T], *args: Any,
                  deadline: float | None = DEFAULT, patience: float = PATIENCE_S) -> T:
        """Blocking ``fn(*args)`` (reads: ``read``, ``snapshot``, a query function) on a reader
        thread; ``StoreUnavailable`` while the store is down, once it is found down, or when
        the call outlived ``deadline`` and then ``patience`` more."""
        return await self._gated(self._readers, deadline, fn, *args, patience=patience)

    async def write(self, fn: Callable[..., T], *args: Any,
                    deadline: float | None = DEFAULT, always: bool = False) -> T:
        """``atomic(fn, *args)`` on the writer thread, under ``deadline`` (None: wait for the
        outcome, for background work). A missed deadline raises ``StoreUnavailable`` whose
        ``pending`` future tells whether the write still committed. ``always``: tried even in
        a request that already waited out a deadline (clean-up, such as releasing a lease)."""
        return await self._gated(self._executor, deadline, self.atomic, fn, *args,
                                 always=always)

    async def write_aside(self, fn: Callable[..., T], *args: Any) -> T:
        """``atomic(fn, *args)`` for background work (queued writes written on the store's
        return, usage flushes), waiting for the outcome: on PostgreSQL on a thread of its own,
        so that the writes of requests never wait behind it (a backlog after an outage takes
        seconds); on SQLite, whose writes are one at a time anyway, on the writer thread."""
        return await self._gated(self._aside, None, self.atomic, fn, *args)

    def read(self, sql: str, params: Params = ()) -> list[Any]:
        """Every row of one read statement (rows answer ``row[0]`` and ``row["name"]``)."""
        return self._retry(self.backend.read, sql, params)

    def read_one(self, sql: str, params: Params = ()) -> Any:
        rows = self.read(sql, params)
        return rows[0] if rows else None

    def ping(self) -> None:
        """Raise unless the database answers."""
        self.read("SELECT 1")

    def describe(self) -> str:
        """The backend and where it is, without credentials: ``sqlite <path>`` or
        ``postgresql postgresql://user@host:port/db``."""
        return self.backend.describe()

    def close(self) -> None:
        # A SQLite connection closed while another thread runs a query on it crashes the
        # process, so its reads are waited for (they are bounded: a local file); a PostgreSQL
        # read stalled by a partition is not, and its pool closes its connections safely.
        self._aside.shutdown(wait=True)
        self._executor.shutdown(wait=True)
        self._readers.shutdown(wait=self._local_file, cancel_futures=True)
        self.backend.close()

    @property
    def _local_file(self) -> bool:
        return self.backend.kind == "sqlite"

    async def aclose(self) -> None:
        """``close`` from async code: the probe stopped, the threads joined off the loop."""
        await self.health.close(wait=self._local_file)
        await asyncio.to_thread(self.close)

    # --- change detection -----------------------------------------------------------------------

    def versions(self) -> dict[str, int]:
        """The ``meta`` change counters (``keys_version``, ``policy_version``), in one indexed
        read: every write of keys or policy layers, by any process, moves one of them."""
        rows = self.read("SELECT name, value FROM meta WHERE name IN (?, ?)", VERSION_NAMES)
        found = {str(r[0]): int(r[1]) for r in rows}
        return {name: found.get(name, 0) for name in VERSION_NAMES}
