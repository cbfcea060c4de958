"""A proxy starting on a store that earlier processes used: what they left behind does not make
its requests wait."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from proxy.store import Store, leases
from proxy.testing.harness import Harness


def test_a_start_on_sqlite_releases_what_earlier_processes_held(
        tmp_path: Path, store_target: Callable[[str], Path | str],
        database_url: str | None) -> None:
    # On SQLite the starting process is the store's only one: a lease held by an earlier
    # process (a restart mid-compaction) would only make requests wait for it to run out. On
    # PostgreSQL other replicas may be alive: their leases stay.
    target = store_target("proxy.db")
    before = Store(target)
    assert before.atomic(leases.claim, "compaction c1 h1", 300, "an-earlier-process")
    before.close()
    with Harness(tmp_path) as h:
        assert leases.held(h.state.store, "compaction c1 h1") == (database_url is not None)
