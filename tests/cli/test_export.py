"""``context-proxy export FILE.db`` (``proxy.cli.export``) on the suite's store (SQLite, or a
PostgreSQL schema under ``--store=postgres``): a conversation with a compaction, its usage and
money, spills and keys written through the store's own API, then exported. The file lists its
tables to sqlite-utils, holds as many rows as the store, declares its foreign keys, finds a fact
of a summary by full-text search, and holds no key, key id or key hash; the store is only read."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from proxy.cli import main
from proxy.cli.export import ExportRefused, export
from proxy.context.identity import conversation_key
from proxy.context.records.compactions import Records
from proxy.context.stages.mask import Spill
from proxy.store import Store
from proxy.store.keys import hash_key
from proxy.store.readonly import ReadOnlyStore

ROOT = Path(__file__).resolve().parents[2]
FACT = "the staging database password rotates every Tuesday at 04:00 (ticket OPS-7731)"
TABLES = {"organizations", "users", "conversations", "dividers", "summaries", "usage",
          "usage_hourly"}
STORE_TABLES = {"conversations": "conversations", "dividers": "compactions",
                "summaries": "compactions", "usage": "usage_totals",
                "usage_hourly": "usage_hourly", "spills": "spills"}


@dataclass
class Filled:
    target: Path | str
    secrets: list[str]  # key plaintexts, their hashes and ids: none may be exported
    conversations: list[str]


def _compaction(summary: str) -> dict[str, Any]:
    return {"kind": "auto", "prefix_hash": "ph-" + hashlib.sha256(summary.encode()).hexdigest(),
            "covered": 12, "preserved": (0,), "summary": summary, "summary_model": "gpt-4o-mini",
            "summary_tokens": 180, "tokens_before": 90_000, "tokens_after": 12_000,
            "status": "compacted"}


async def _play(store: Store) -> list[str]:
    """Two conversations of acme (one compacted twice, with a spill) and one of globex, with
    their usage and money, through ``Records``."""
    records = Records(store)
    played = []
    for org, public, user, summaries in (("acme", "ticket-1", "alice", [FACT, "second pass"]),
                                         ("acme", "ticket-2", None, []),
                                         ("globex", "fp-abc", "bob", ["globex summary"])):
        key = conversation_key(org, public)
        played.append(key)
        await records.ensure(org, key)
        for i, summary in enumerate(summaries):
            store.atomic(partial(records.insert_compaction, **_compaction(summary)), org, key,
                         f"div_{org}_{i}", time.time())
        records.hourly.turn(org, user, key, public, 90_000, 12_000, "auto")
        records.add_upstream_usage(org, key, "gpt-4o", 12_000, 8_000, user=user, spent=0.25,
                                   without=1.75, lost=(1, 2))
        records.add_upstream_usage(org, key, "gpt-4o-mini", 3_000, 0, summary=True, user=user,
                                   spent=0.01)
        await records.add_spills(org, key, [Spill(hashlib.sha256(public.encode()).hexdigest(),
                                                  "shell", "call_1", f"output of {public}", 40,
                                                  3)], retention_days=7)
    await records.flush_usage()
    return played


@pytest.fixture
async def filled(store_target: Callable[[str], Path | str],
                 monkeypatch: pytest.MonkeyPatch) -> Filled:
    target = store_target("proxy.db")
    if isinstance(target, Path):
        monkeypatch.setenv("CONTEXT_PROXY_DB", str(target))
    store = Store(target)
    try:
        secrets = []
        for org, user in (("acme", "alice"), ("acme", None), ("globex", "bob")):
            rec, plaintext = store.keys.create(org, user)
            secrets += [plaintext, hash_key(plaintext), rec.id]
        store.keys.revoke(secrets[-1])
        bound = store.keys.bind("sk-client-own-key", "globex", "bob")
        secrets += ["sk-client-own-key", hash_key("sk-client-own-key"), bound.id]
        played = await _play(store)
    finally:
        store.close()
    return Filled(target, secrets, played)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def go(*args: str) -> tuple[int, str, str]:
        code = main(["export", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return go


def _store_counts(target: Path | str) -> dict[str, int]:
    store = Store(target)
    try:
        return {mine: int(store.read_one(f"SELECT COUNT(*) FROM {theirs}")[0])
                for mine, theirs in STORE_TABLES.items()}
    finally:
        store.close()


def _digest(target: Path | str) -> str | None:
    """The SQLite store file's digest (None on PostgreSQL, which its READ ONLY transaction
    keeps from being written)."""
    return hashlib.sha256(target.read_bytes()).hexdigest() if isinstance(target, Path) else None


def _text_cells(db: sqlite_utils.Database) -> Iterator[str]:
    for name in db.table_names():
        for row in db.execute(f"SELECT * FROM [{name}]").fetchall():
            yield from (str(v) for v in row if v is not None)


def test_the_export_holds_the_store_and_no_secret(filled: Filled, run: Any,
                                                  tmp_path: Path) -> None:
    before = _digest(filled.target)
    out = tmp_path / "export.db"
    code, stdout, err = run(str(out))
    assert code == 0, err
    assert err.startswith("store: ") and stdout.startswith(f"wrote {out}: ")
    assert _digest(filled.target) == before  # only read
    assert out.stat().st_mode & 0o077 == 0  # its owner's only
    db = sqlite_utils.Database(out)
    assert set(db.table_names()) >= TABLES and "spills" not in db.table_names()
    store = _store_counts(filled.target)
    for name in TABLES - {"organizations", "users"}:
        assert db.table(name).count == store[name] > 0, name
    assert [r["org"] for r in db.query("SELECT org FROM organizations ORDER BY org")] == [
        "acme", "globex"]
    assert {(r["org"], r["user"]) for r in db.query("SELECT * FROM users")} == {
        ("acme", "alice"), ("globex", "bob")}
    assert set(db.table("conversations").pks) == {"id"}
    assert db.table("usage").pks == ["conversation", "model"]
    assert {(fk.column, fk.other_table) for fk in db.table("dividers").foreign_keys} == {
        ("conversation", "conversations")}
    assert {(fk.column, fk.other_table) for fk in db.table("summaries").foreign_keys} == {
        ("divider", "dividers"), ("conversation", "conversations")}
    assert ("org", "organizations") in {(fk.column, fk.other_table)
                                        for fk in db.table("conversations").foreign_keys}
    found = list(db.table("summaries").search("OPS-7731", quote=True))
    assert [r["text"] for r in found] == [FACT]
    cells = "\n".join(_text_cells(db))
    raw = out.read_bytes()
    for secret in filled.secrets:
        assert secret not in cells and secret.encode() not in raw, secret
    assert "key_hash" not in {c.name for t in db.tables for c in t.columns}


def test_organizations_carry_key_counts_and_money(filled: Filled, run: Any,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "export.db"
    assert run(str(out))[0] == 0
    orgs = {r["org"]: r for r in sqlite_utils.Database(out).query("SELECT * FROM organizations")}
    acme, globex = orgs["acme"], orgs["globex"]
    assert (acme["keys"], acme["keys_revoked"], acme["users"]) == (2, 0, 1)
    assert (globex["keys"], globex["keys_revoked"], globex["users"]) == (1, 1, 1)
    assert (acme["conversations"], acme["dividers"]) == (2, 2)
    assert acme["cost_spent_usd"] == pytest.approx(2 * 0.26)
    assert acme["cost_without_usd"] == pytest.approx(2 * 1.75)
    assert (acme["reasoning_removed"], acme["reasoning_dropped"]) == (2, 4)
    usage = sqlite_utils.Database(out).table("usage")
    assert {"cost_spent_usd", "cost_without_usd", "reasoning_removed", "reasoning_dropped",
            "summary_cache_write_tokens"} <= set(usage.columns_dict)


def test_spills_only_when_asked(filled: Filled, run: Any, tmp_path: Path) -> None:
    out = tmp_path / "with-spills.db"
    assert run(str(out), "--spills")[0] == 0
    db = sqlite_utils.Database(out)
    assert db.table("spills").count == _store_counts(filled.target)["spills"] == 3
    assert {(fk.column, fk.other_table) for fk in db.table("spills").foreign_keys} == {
        ("conversation", "conversations")}
    assert "output of ticket-1" in {r["content"] for r in db.query("SELECT * FROM spills")}


def test_an_existing_file_is_refused_without_force(filled: Filled, run: Any,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "export.db"
    out.write_text("mine")
    code, stdout, err = run(str(out))
    assert (code, stdout) == (1, "") and err.splitlines()[-1] == (
        f"error: {out} exists: give --force to replace it")
    assert out.read_text() == "mine"
    assert run(str(out), "--force")[0] == 0
    assert "summaries" in sqlite_utils.Database(out).table_names()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_small_pages_export_the_same_rows(filled: Filled, tmp_path: Path) -> None:
    source = ReadOnlyStore(filled.target)
    try:
        counts = export(source, tmp_path / "paged.db", spills=True, page_rows=1)
    finally:
        source.close()
    store = _store_counts(filled.target)
    assert {name: counts[name] for name in store} == store
    assert (counts["organizations"], counts["users"]) == (2, 2)


@pytest.mark.own_store  # a SQLite file of its own: the export refuses to write over it
def test_the_store_itself_is_never_the_file(tmp_path: Path) -> None:
    path = tmp_path / "proxy.db"
    Store(path).close()
    source = ReadOnlyStore(path)
    try:
        with pytest.raises(ExportRefused, match="is the store itself"):
            export(source, path, force=True, store_path=path)
        with pytest.raises(ExportRefused, match="no folder"):
            export(source, tmp_path / "missing" / "x.db")
    finally:
        source.close()


@pytest.mark.own_store  # stores that do not exist, on purpose
@pytest.mark.parametrize(("env", "expected"), [
    ({"CONTEXT_PROXY_DB": "{tmp}/nowhere.db"},
     "error: CONTEXT_PROXY_DB: cannot read the store at {tmp}/nowhere.db: no such file"),
    ({"CONTEXT_PROXY_DATABASE_URL": "postgresql://someone:hunter2@127.0.0.1:1/none"},
     "error: CONTEXT_PROXY_DATABASE_URL: cannot read the store at "
     "postgresql://someone@127.0.0.1:1/none: "),
])
def test_a_store_that_cannot_be_read_is_one_line(
        env: dict[str, str], expected: str, run: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONTEXT_PROXY_DATABASE_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    code, stdout, err = run(str(tmp_path / "export.db"))
    assert (code, stdout) == (2, "") and len(err.splitlines()) == 1, err
    assert err.startswith(expected.format(tmp=tmp_path)) and "hunter2" not in err
    assert not (tmp_path / "export.db").exists() and not (tmp_path / "nowhere.db").exists()


def test_the_documented_queries_run(filled: Filled, run: Any, tmp_path: Path) -> None:
    """The example queries of docs/operations.md, on an export."""
    out = tmp_path / "export.db"
    assert run(str(out))[0] == 0
    db = sqlite_utils.Database(out)
    docs = (ROOT / "docs" / "operations.md").read_text()
    queries = re.findall(r'^sqlite-utils export\.db "([^"]+)"', docs, re.M)
    searches = re.findall(r"^sqlite-utils search export\.db summaries '([^']+)'", docs, re.M)
    assert queries and searches
    for sql in queries:
        assert list(db.query(sql)), sql
    saved = {r["org"]: r["saved_usd"] for r in db.query(queries[0])}
    assert saved["acme"] == pytest.approx(2 * (1.75 - 0.26))
    assert all(list(db.table("summaries").search(q)) for q in searches)
