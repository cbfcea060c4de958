"""The store's keys (``proxy.store.keys``), on the suite's backend: only a key's hash is kept,
every write moves ``keys_version`` (a failed revoke does not), and counts per organization
leave revoked keys out."""

from __future__ import annotations

from collections.abc import Callable

from proxy.store import Store
from proxy.store.keys import KeyRecord, hash_key, key_counts


def test_hash_key_is_the_hex_sha256_of_the_key() -> None:
    assert len(hash_key("cp-abc")) == 64 and hash_key("cp-abc") != hash_key("cp-abd")
    assert hash_key("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_an_issued_key_is_stored_as_its_hash_only(new_store: Callable[[str], Store]) -> None:
    store = new_store("keys.db")
    rec, plaintext = store.keys.create("acme", "alice")
    assert plaintext.startswith("cp-") and len(plaintext) > 40
    assert (rec.org, rec.user, rec.kind, rec.revoked_at) == ("acme", "alice", "proxy", None)
    rows = [dict(r) for r in store.read("SELECT * FROM keys")]
    assert [r["key_hash"] for r in rows] == [hash_key(plaintext)]
    assert plaintext not in repr(rows)
    assert store.keys.find(hash_key(plaintext)) == rec
    assert store.keys.find(hash_key("cp-unknown")) is None


def test_a_bound_key_finds_its_organization(new_store: Callable[[str], Store]) -> None:
    store = new_store("keys.db")
    rec = store.keys.bind("sk-client-own", "globex")
    assert rec.kind == "bound" and rec.user is None
    assert store.keys.find_many([hash_key("sk-client-own"), hash_key("sk-other")]) == [
        (hash_key("sk-client-own"), rec)]
    assert store.keys.find_many([]) == []


def test_every_key_write_moves_the_version_and_the_writes_count(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("keys.db")
    assert (store.keys.version(), store.keys.writes) == (0, 0)
    rec, _ = store.keys.create("acme")
    store.keys.bind("sk-x", "acme")
    assert (store.keys.version(), store.keys.writes) == (2, 2)
    assert store.keys.revoke(rec.id) is True
    assert (store.keys.version(), store.keys.writes) == (3, 3)
    assert store.keys.revoke(rec.id) is False  # already revoked: nothing written
    assert store.keys.revoke("key_nosuch") is False
    assert (store.keys.version(), store.keys.writes) == (3, 3)
    assert store.versions() == {"keys_version": 3, "policy_version": 0}


def test_all_lists_every_key_oldest_first_revoked_ones_too(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("keys.db")
    first, _ = store.keys.create("acme")
    second, _ = store.keys.create("beta", "bob")
    store.keys.revoke(first.id)
    listed = store.keys.all()
    assert [k.id for k in listed] == [first.id, second.id]
    assert listed[0].revoked_at is not None and listed[1].revoked_at is None
    assert all(isinstance(k, KeyRecord) for k in listed)


def test_key_counts_are_active_keys_per_organization(new_store: Callable[[str], Store]) -> None:
    store = new_store("keys.db")
    gone, _ = store.keys.create("acme")
    store.keys.create("acme")
    store.keys.create("acme", "alice")
    store.keys.bind("sk-x", "beta")
    store.keys.revoke(gone.id)
    assert store.snapshot(key_counts) == {"acme": 2, "beta": 1}


def test_the_keys_changed_since_a_version_are_read_with_the_version(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("k.db")
    old, _ = store.keys.create("acme")
    since = store.keys.version()
    new, new_key = store.keys.create("acme")
    store.keys.revoke(old.id)
    store.keys.revoke(old.id)  # already revoked: no write, no version
    version, changed = store.keys.changed_since(since)
    assert version == since + 2 == store.keys.version()
    assert sorted(rec.id for _, rec in changed) == sorted([old.id, new.id])
    assert dict((rec.id, digest) for digest, rec in changed)[new.id] == hash_key(new_key)
    assert store.keys.changed_since(version) == (version, [])
