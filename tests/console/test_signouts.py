"""Console sign-outs in the suite's store (``proxy.console.signouts``): a sign-out is refused at
once where it was made and, after a refresh, by another process; expired rows are purged."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from proxy.console.session import Session, Sessions
from proxy.console.signouts import Refresher, purge_expired, record
from proxy.store import Store

TOKEN = "admin-" + "t" * 30


async def test_a_sign_out_reaches_another_process_after_its_refresh(
        store_target: Callable[[str], Path | str]) -> None:
    a, b = Store(store_target("s.db")), Store(store_target("s.db"))
    try:
        here, there = Sessions(TOKEN), Sessions(TOKEN)  # one admin token: one cookie works on both
        cookie, session = here.issue()
        mine, theirs = Refresher(a, here), Refresher(b, there)
        await theirs.refresh()
        assert there.check(cookie) == session
        await mine.sign_out(session)
        assert here.check(cookie) is None and there.check(cookie) == session
        await theirs.refresh()
        assert there.check(cookie) is None
        version = theirs.version
        await theirs.refresh()  # nothing moved: one read, the same version
        assert theirs.version == version
    finally:
        a.close()
        b.close()


def test_rows_of_expired_sessions_are_purged(new_store: Callable[[str], Store]) -> None:
    store = new_store("s.db")
    store.atomic(record, "old", int(time.time()) - 5)
    store.atomic(record, "live", int(time.time()) + 600)  # purges the expired one
    assert [r[0] for r in store.read("SELECT nonce FROM console_signouts")] == ["live"]
    store.atomic(record, "live", int(time.time()) + 600)  # the same sign-out twice: one row
    assert store.atomic(purge_expired) == 0
    assert store.read_one("SELECT value FROM meta WHERE name = 'signouts_version'")[0] == 3
    assert isinstance(Session("n", 1), Session)
