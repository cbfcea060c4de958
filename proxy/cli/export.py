"""``context-proxy export FILE.db``: the store's organizations, users, conversations, dividers,
summaries and usage (and, with ``--spills``, spills) copied into a new SQLite file made with
sqlite-utils, for ``sqlite-utils`` queries and Datasette.

Contract:
- The store is only read (``proxy.store.readonly``: never migrated, created or written), in one
  read transaction, in pages of ``PAGE_ROWS`` rows, so every table of the file agrees and a
  large store never sits in memory whole.
- Nothing secret is copied: no key, no key hash, no key id; keys appear only as counts per
  organization and user. Policy layers are not copied.
- Each table has a primary key and declares its foreign keys; ``summaries`` has full-text
  search (``enable_fts``). The usage tables take every column the store has, so a counter a
  later migration adds is exported without a change here.
- The file is written aside and moved into place when complete: a failed export leaves no
  half file, and an existing FILE is replaced only with ``force`` (never the store itself).
  It is readable by its owner only (``mkstemp``'s mode): spills and summaries are the
  clients' own words.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings
from proxy.store.readonly import Column, ReadOnlyStore, StoreUnreadable

PAGE_ROWS = 500
GROUPS = ("org", "user", "hour")  # the key of usage_hourly; its other columns are counters
KEY_COUNTS = ("keys", "keys_revoked")


@dataclass(frozen=True)
class Copy:
    """A table of the file copied from a table of the store: ``pick`` is ``(column in the
    file, column in the store)`` pairs (empty: every store column but ``drop``); ``key`` is the
    store's primary key; ``fks`` are ``(column, other table, other column)`` in the file."""

    name: str
    source: str
    key: tuple[str, ...]
    fks: tuple[tuple[str, str, str], ...] = ()
    pick: tuple[tuple[str, str], ...] = ()
    drop: tuple[str, ...] = ()

    def columns(self, store: list[Column]) -> list[tuple[str, Column]]:
        """(column in the file, the store's column) for each column copied."""
        by_name = {c.name: c for c in store}
        if self.pick:
            return [(mine, by_name[theirs]) for mine, theirs in self.pick]
        return [(c.name, c) for c in store if c.name not in self.drop]


TO_CONVERSATION = (("conversation", "conversations", "id"),)
COPIES = (
    Copy("conversations", "conversations", ("id",), (("org", "organizations", "org"),)),
    Copy("dividers", "compactions", ("id",), TO_CONVERSATION, drop=("summary",)),
    Copy("summaries", "compactions", ("id",),
         (("divider", "dividers", "id"), *TO_CONVERSATION),
         pick=(("divider", "id"), ("conversation", "conversation"), ("text", "summary"))),
    Copy("usage", "usage_totals", ("conversation", "model"), TO_CONVERSATION),
    Copy("usage_hourly", "usage_hourly", GROUPS, (("org", "organizations", "org"),)),
)
SPILLS = Copy("spills", "spills", ("conversation", "id"), TO_CONVERSATION)


class ExportRefused(Exception):
    """The export cannot start (FILE exists without ``force``, is the store, or its folder is
    missing): one line for a person."""


def export(source: ReadOnlyStore, path: Path, *, spills: bool = False, force: bool = False,
           store_path: Path | None = None, page_rows: int = PAGE_ROWS) -> dict[str, int]:
    """Write the export of ``source`` to ``path``; return each table's row count.
    ``ExportRefused`` before anything is written when ``path`` exists (unless ``force``), is
    ``store_path`` (the SQLite store itself) or has no folder; ``StoreUnreadable`` when the
    store cannot be read (``path`` is then left as it was)."""
    _check_target(path, force, store_path)
    copies = (*COPIES, SPILLS) if spills else COPIES
    source.require([*{c.source for c in copies}, "keys"])
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(fd)
    try:
        counts = _write(source, Path(aside), copies, page_rows)
        with open(aside, "rb+") as done:  # on disk before it takes FILE's name
            os.fsync(done.fileno())
        os.replace(aside, path)
    except BaseException:
        Path(aside).unlink(missing_ok=True)
        raise
    return counts


def _check_target(path: Path, force: bool, store_path: Path | None) -> None:
    if store_path is not None and path.resolve() == store_path.resolve():
        raise ExportRefused(f"{path} is the store itself: name another file")
    if not path.parent.is_dir():
        raise ExportRefused(f"cannot write {path}: no folder {path.parent}")
    if path.is_dir():
        raise ExportRefused(f"{path} is a folder")
    if path.exists() and not force:
        raise ExportRefused(f"{path} exists: give --force to replace it")


def _write(source: ReadOnlyStore, path: Path, copies: tuple[Copy, ...],
           page_rows: int) -> dict[str, int]:
    db = sqlite_utils.Database(path)
    # A file aside, discarded on any failure: no journal and no sync per page (one at the end).
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    try:
        counters = [c for c in source.columns("usage_hourly") if c.name not in GROUPS]
        _create_groups(db, counters)
        counts = {copy.name: _copy(db, source, copy, page_rows) for copy in copies}
        keys = _key_counts(source, page_rows)
        counts.update(_fill_groups(db, counters, keys))
        db.table("summaries").enable_fts(["text"])
        return counts
    finally:
        db.close()


def _create_groups(db: sqlite_utils.Database, counters: list[Column]) -> None:
    """``organizations`` and ``users`` (filled last, from the copied tables and key counts)."""
    sums = {c.name: c.type for c in counters}
    db.table("organizations").create(
        {"org": str, **dict.fromkeys(KEY_COUNTS, int), "users": int, "conversations": int,
         "dividers": int, **sums}, pk="org")
    db.table("users").create({"org": str, "user": str, **dict.fromkeys(KEY_COUNTS, int),
                              **sums}, pk=("org", "user"),
                             foreign_keys=[("org", "organizations", "org")])


def _copy(db: sqlite_utils.Database, source: ReadOnlyStore, copy: Copy,
          page_rows: int) -> int:
    columns = copy.columns(source.columns(copy.source))
    names = [mine for mine, _ in columns]
    theirs = [c.name for _, c in columns]
    key = [names[theirs.index(k)] for k in copy.key]
    table = db.table(copy.name)
    table.create({mine: c.type for mine, c in columns}, pk=key[0] if len(key) == 1 else key,
                 foreign_keys=list(copy.fks))
    n = 0
    for page in source.pages(copy.source, theirs, copy.key, page_rows):
        table.insert_all((dict(zip(names, row, strict=True)) for row in page),
                         batch_size=page_rows)
        n += len(page)
    return n


def _key_counts(source: ReadOnlyStore, page_rows: int) -> dict[tuple[str, str], list[int]]:
    """(org, user or '') -> [active keys, revoked keys]; only these columns are read (the id
    orders the pages, and is dropped)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for page in source.pages("keys", ["id", "org", "user", "revoked_at"], ["id"], page_rows):
        for _, org, user, revoked_at in page:
            counts.setdefault((str(org), str(user or "")), [0, 0])[revoked_at is not None] += 1
    return counts


Group = dict[str, Any]  # a row of organizations or users, by column


def _fill_groups(db: sqlite_utils.Database, counters: list[Column],
                 keys: dict[tuple[str, str], list[int]]) -> dict[str, int]:
    """Fill ``organizations`` and ``users`` from the copied ``usage_hourly``, ``conversations``
    and ``dividers`` and the key counts; return their row counts."""
    zero = {c.name: c.type(0) for c in counters}
    orgs: dict[str, Group] = {}
    users: dict[tuple[str, str], Group] = {}

    def group(org: str, user: str = "") -> Group:
        total = orgs.setdefault(org, {"org": org, **zero})
        return users.setdefault((org, user), {"org": org, "user": user, **zero}) if user else total

    _sum_usage(db, counters, group)
    for (org, user), (active, revoked) in keys.items():
        for rec in {id(g): g for g in (group(org), group(org, user))}.values():
            rec["keys"] = rec.get("keys", 0) + active
            rec["keys_revoked"] = rec.get("keys_revoked", 0) + revoked
    for name, sql in (("conversations", "SELECT org, COUNT(*) FROM conversations GROUP BY org"),
                      ("dividers", "SELECT c.org, COUNT(*) FROM dividers d JOIN conversations c "
                       "ON c.id = d.conversation GROUP BY c.org")):
        for org, n in db.execute(sql).fetchall():
            group(org)[name] = n
    for org, _ in users:
        group(org)["users"] = group(org).get("users", 0) + 1
    db.table("organizations").insert_all(_zeros(orgs.values(), ("users", "conversations",
                                                               "dividers", *KEY_COUNTS)))
    db.table("users").insert_all(_zeros(users.values(), KEY_COUNTS))
    return {"organizations": len(orgs), "users": len(users)}


def _sum_usage(db: sqlite_utils.Database, counters: list[Column],
               group: Callable[[str, str], Group]) -> None:
    """Add each organization's and user's ``usage_hourly`` sums to their rows."""
    sums = ", ".join(f"SUM([{c.name}]) AS [{c.name}]" for c in counters)
    for row in db.query(f"SELECT org, [user], {sums} FROM usage_hourly GROUP BY org, [user]"):
        org, user = row.pop("org"), row.pop("user")
        for rec in {id(g): g for g in (group(org, ""), group(org, user))}.values():
            for name, value in row.items():
                rec[name] += value or 0


def _zeros(rows: Iterable[Group], names: tuple[str, ...]) -> Iterator[Group]:
    """Each row with 0 in those of ``names`` it lacks."""
    for row in rows:
        yield {**dict.fromkeys(names, 0), **row}


# --- the command ---------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", type=Path,
                   help="the SQLite file to write (e.g. export.db); refused if it exists")
    p.add_argument("--spills", action="store_true",
                   help="also export the spills (the tool outputs masking set aside, in full)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")


def _open(settings: Settings) -> ReadOnlyStore:
    """The store the settings name, read-only; ``ConfigError`` naming the setting."""
    from proxy.cli.startup import store_name

    setting = "CONTEXT_PROXY_DATABASE_URL" if settings.database_url else "CONTEXT_PROXY_DB"
    try:
        return ReadOnlyStore(settings.database_url or settings.db_path)
    except StoreUnreadable as e:
        raise ConfigError(f"{setting}: cannot read the store at {store_name(settings)}: "
                          f"{e}") from None


def run_cli(args: argparse.Namespace) -> int:
    """Exit status: 0 written (the tables and their row counts on stdout), 1 refused (FILE
    exists, is the store, or has no folder), 2 a store that cannot be read (``ConfigError``)."""
    from proxy.cli.startup import store_name

    settings = load_settings()
    source = _open(settings)
    print(f"store: {store_name(settings)}", file=sys.stderr)
    try:
        counts = export(source, args.file, spills=args.spills, force=args.force,
                        store_path=None if settings.database_url else settings.db_path)
    except ExportRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except StoreUnreadable as e:
        raise ConfigError(f"cannot read the store at {store_name(settings)}: {e}") from None
    finally:
        source.close()
    print(f"wrote {args.file}: " + ", ".join(f"{name} {n}" for name, n in counts.items()))
    return 0
