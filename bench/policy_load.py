"""Policy lookup at scale: 1,000 organizations (each with a stored layer) and 10,000 keys.

Two uses:

- ``populate(db)`` fills a fresh context-proxy database; ``bench/overhead.py --policy-load``
  uses it to measure a second context-proxy ("cp-loaded") beside the empty one, in the same
  alternating rounds, so the difference between the two rows is what policy lookup costs.
- ``python bench/policy_load.py`` times the lookup itself in process: ``Authenticator``
  (key cache) + ``PolicyService.resolve`` per request, with the database loaded and empty, and
  the cost of a reload after a change (it runs off the request path, in a worker thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy.store import Store  # noqa: E402
from proxy.store.keys import hash_key  # noqa: E402

ORGS = 1_000
KEYS = 10_000
BENCH_INDEX = 42  # the load generator uses the user key of org-0042


def _layer(rng: random.Random) -> dict[str, object]:
    return {"compaction.trigger_ratio": round(rng.uniform(0.7, 0.9), 2),
            "masking.keep_recent": rng.randint(3, 9),
            "compaction.pinned_tools": ["write_todos", f"tool_{rng.randint(0, 9)}"]}


def populate(db: Path, orgs: int = ORGS, keys: int = KEYS) -> str:
    """Fill ``db`` (created and migrated if needed): ``orgs`` organizations with an org layer,
    every tenth with a user layer too, and ``keys`` proxy keys spread over them (each
    organization's first key belongs to its user ``user-1``). Returns the plaintext of the user
    key of ``org-0042``, for the load generator."""
    Store(db).close()
    rng = random.Random(5)
    now = time.time()
    conn = sqlite3.connect(str(db), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        layers = [(f"org-{i:04d}", "", json.dumps(_layer(rng)), now) for i in range(orgs)]
        layers += [(f"org-{i:04d}", "user-1", json.dumps(_layer(rng)), now)
                   for i in range(0, orgs, 10)]
        conn.executemany("INSERT INTO policy_layers (org, user, fields, updated_at) "
                         "VALUES (?, ?, ?, ?)", layers)
        conn.execute("INSERT INTO meta (name, value) VALUES ('policy_version', 1) "
                     "ON CONFLICT(name) DO UPDATE SET value = value + 1")
        rows = []
        for k in range(keys):
            org = f"org-{k % orgs:04d}"
            user = "user-1" if k < orgs else None  # each org's first key is a user's
            rows.append((f"key_bench{k:06d}", hash_key(f"cp-bench-{k}"), org, user, "proxy",
                         now, None))
        conn.executemany("INSERT INTO keys (id, key_hash, org, user, kind, created_at, "
                         "revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("UPDATE meta SET value = value + 1 WHERE name = 'keys_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return f"cp-bench-{BENCH_INDEX % orgs}"


# --- in-process lookup timing ---------------------------------------------------------------


class _Req:
    """The only part of an aiohttp request the authenticator reads."""

    def __init__(self, key: str) -> None:
        self.headers = {"Authorization": f"Bearer {key}"}


async def _lookup_ns(db: Path, keys: list[str], rounds: int) -> tuple[float, float, float]:
    """(median ns per auth + resolve, median ns per resolve alone, ms per full reload)."""
    from proxy.auth import Authenticator
    from proxy.policy.live import PolicyService
    from proxy.policy.platform import PlatformConfig

    store = Store(db)
    try:
        auth = Authenticator(store, "proxy_keys", "sk-upstream")
        policies = PolicyService(PlatformConfig(), store)
        reqs = [_Req(k) for k in keys]
        for r in reqs:  # warm both caches, as a running server would be
            p = await auth.authenticate(r)  # type: ignore[arg-type]
            policies.resolve(p.org, p.user)
        both, alone = [], []
        principals = [await auth.authenticate(r) for r in reqs]  # type: ignore[arg-type]
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            for r in reqs:
                p = await auth.authenticate(r)  # type: ignore[arg-type]
                policies.resolve(p.org, p.user)
            t1 = time.perf_counter_ns()
            for p in principals:
                policies.resolve(p.org, p.user)
            t2 = time.perf_counter_ns()
            both.append((t1 - t0) / len(reqs))
            alone.append((t2 - t1) / len(reqs))
        from proxy.policy.rows import load_snapshot

        t0 = time.perf_counter()
        policies._apply(await asyncio.to_thread(store.snapshot, load_snapshot))
        reload_ms = (time.perf_counter() - t0) * 1e3
    finally:
        store.close()
    return statistics.median(both), statistics.median(alone), reload_ms


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--orgs", type=int, default=ORGS)
    p.add_argument("--keys", type=int, default=KEYS)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cp-policy-") as tmp:
        loaded, empty = Path(tmp) / "loaded.db", Path(tmp) / "empty.db"
        t0 = time.perf_counter()
        populate(loaded, args.orgs, args.keys)
        print(f"populated {args.orgs:,} orgs and {args.keys:,} keys in "
              f"{time.perf_counter() - t0:.2f} s")
        all_keys = [f"cp-bench-{k}" for k in range(args.keys)]
        big = asyncio.run(_lookup_ns(loaded, all_keys, args.rounds))
        populate(empty, 1, 1)
        small = asyncio.run(_lookup_ns(empty, ["cp-bench-0"] * 1000, args.rounds))
    print(f"{'':28s} {'auth+resolve':>13s} {'resolve':>9s} {'reload':>9s}")
    print(f"{'1 org, 1 key':28s} {small[0]:10.0f} ns {small[1]:6.0f} ns {small[2]:6.1f} ms")
    print(f"{f'{args.orgs:,} orgs, {args.keys:,} keys':28s} {big[0]:10.0f} ns "
          f"{big[1]:6.0f} ns {big[2]:6.1f} ms")
    print(f"ratio loaded/empty: auth+resolve {big[0] / small[0]:.2f}x, "
          f"resolve {big[1] / small[1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
