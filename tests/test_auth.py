"""Who calls (``proxy.auth``), on the suite's store, without a server: the key from either
header, issued keys resolved to their organization, revoked and unknown keys refused (also
when another process revoked them), passthrough keys scoped to themselves, and through an
outage seen keys served from memory within the grace while unseen ones get 503."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from aiohttp.test_utils import make_mocked_request

from proxy.auth import DEFAULT_ORG, Authenticator, Principal, bearer_token
from proxy.errors import ApiError
from proxy.store import Store, StoreUnavailable
from proxy.store.health import StoreHealth
from proxy.store.keys import hash_key


def req(**headers: str) -> object:
    return make_mocked_request("POST", "/v1/chat/completions", headers=headers)


def test_the_key_comes_from_authorization_or_x_api_key() -> None:
    assert bearer_token(req(Authorization="Bearer  cp-1 ")) == "cp-1"  # type: ignore[arg-type]
    assert bearer_token(req(Authorization="bearer cp-2")) == "cp-2"  # type: ignore[arg-type]
    assert bearer_token(req(**{"x-api-key": "cp-3"})) == "cp-3"  # type: ignore[arg-type]
    assert bearer_token(req(Authorization="Basic abc")) is None  # type: ignore[arg-type]
    assert bearer_token(req(Authorization="Bearer ")) is None  # type: ignore[arg-type]


def test_a_principal_never_prints_its_key_and_is_scoped_to_its_org() -> None:
    p = Principal("acme", "alice", "key_1", "sk-secret")
    assert p.namespace == "acme" and "sk-secret" not in repr(p)
    assert Principal("x", None, None, None, namespace="x/key:ab").namespace == "x/key:ab"


async def who(auth: Authenticator, key: str) -> Principal:
    return await auth.authenticate(req(Authorization=f"Bearer {key}"))  # type: ignore[arg-type]


async def test_issued_keys_resolve_and_revoked_or_unknown_ones_are_refused(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("a.db")
    rec, key = store.keys.create("acme", "alice")
    auth = Authenticator(store, "proxy_keys", "sk-upstream")
    p = await who(auth, key)
    assert (p.org, p.user, p.key_id, p.upstream_key) == ("acme", "alice", rec.id, "sk-upstream")
    for bad in ("cp-unknown", ""):
        with pytest.raises(ApiError) as info:
            await who(auth, bad) if bad else await auth.authenticate(req())  # type: ignore
        assert info.value.status == 401
    store.keys.revoke(rec.id)  # this process: refused on the very next request
    with pytest.raises(ApiError, match="Invalid or revoked"):
        await who(auth, key)
    bound = store.keys.bind("sk-client-own", "acme")
    assert bound.kind == "bound"
    with pytest.raises(ApiError):  # a bound key is no proxy key
        await who(auth, "sk-client-own")


async def test_a_key_revoked_by_another_process_is_refused_after_the_version_check(
        two_stores: tuple[Store, Store]) -> None:
    mine, theirs = two_stores
    rec, key = theirs.keys.create("acme")
    auth = Authenticator(mine, "proxy_keys", None)
    assert (await who(auth, key)).org == "acme"
    theirs.keys.revoke(rec.id)
    for _ in range(100):  # the version is checked every 50 ms: poll, no timing assertion
        try:
            await who(auth, key)
        except ApiError:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("a key revoked elsewhere was never refused")


async def test_passthrough_keys_go_upstream_scoped_by_their_hash_unless_bound(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("a.db")
    auth = Authenticator(store, "passthrough", None)
    p = await who(auth, "sk-client-a")
    assert (p.org, p.upstream_key) == (DEFAULT_ORG, "sk-client-a")
    assert p.namespace == f"{DEFAULT_ORG}/key:{hash_key('sk-client-a')[:32]}"
    store.keys.bind("sk-client-b", "globex", "bob")
    bound = await who(auth, "sk-client-b")
    assert (bound.org, bound.user, bound.namespace) == ("globex", "bob", "globex")


def unreachable() -> None:
    raise ConnectionError("the database does not answer")


async def test_through_an_outage_seen_keys_are_served_and_unseen_ones_get_503(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("a.db")
    _, seen = store.keys.create("acme")
    _, unseen = store.keys.create("acme")
    auth = Authenticator(store, "proxy_keys", None, grace_s=600)
    short = Authenticator(store, "proxy_keys", None, grace_s=0.001)
    await who(auth, seen)
    await who(short, seen)
    await asyncio.sleep(0.01)  # past the short grace
    store.health = StoreHealth(unreachable)  # the database away: its probes keep failing
    store.health.failed("a test outage")
    try:
        assert (await who(auth, seen)).org == "acme"
        with pytest.raises(StoreUnavailable):
            await who(auth, unseen)
        with pytest.raises(StoreUnavailable):  # past its grace, a seen key is not vouched for
            await who(short, seen)
    finally:
        await store.health.close()


async def test_a_seen_key_waits_no_longer_than_the_deadline_for_a_slow_version_check(
        new_store: Callable[[str], Store]) -> None:
    store = new_store("a.db")
    _, seen = store.keys.create("acme")
    auth = Authenticator(store, "proxy_keys", None)
    await who(auth, seen)
    gate = threading.Event()
    versions = store.keys.version
    store.keys.version = lambda: gate.wait(5) and versions()  # type: ignore[method-assign]
    store.deadline_s = 0.1
    await asyncio.sleep(0.06)  # past CHECK_EVERY_S: the next request checks the version
    try:
        checking = asyncio.ensure_future(who(auth, seen))
        done, _ = await asyncio.wait({checking}, timeout=2.0)
        # Served from the cache while the check goes on (not held for the store's patience).
        assert checking in done and checking.result().org == "acme"
        assert auth._check is not None and not auth._check.done()
    finally:
        gate.set()
        await asyncio.sleep(0.05)
    assert store.up


async def test_after_key_writes_elsewhere_only_the_changed_keys_are_read(
        two_stores: tuple[Store, Store]) -> None:
    mine, theirs = two_stores
    auth = Authenticator(mine, "passthrough", None)
    cached = [theirs.keys.create("acme")[1] for _ in range(5)]
    for key in (*cached, "sk-client-own"):
        await who(auth, key)
    assert (await who(auth, "sk-client-own")).org == DEFAULT_ORG
    reads: list[int] = []
    changed_since, find_many = mine.keys.changed_since, mine.keys.find_many
    mine.keys.changed_since = lambda v: reads.append(v) or changed_since(v)  # type: ignore
    mine.keys.find_many = lambda hashes: reads.append(-len(hashes)) or find_many(hashes)  # type: ignore
    theirs.keys.bind("sk-client-own", "globex")  # a cached passthrough key, bound elsewhere
    for _ in range(100):  # the version is checked every 50 ms: poll, no timing assertion
        if (await who(auth, "sk-client-own")).org == "globex":
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("a key bound elsewhere was never seen")
    # One read of the changed keys, none of the five cached ones.
    assert reads and all(v >= 0 for v in reads)
    assert [(await who(auth, key)).org for key in cached] == ["acme"] * len(cached)
