"""Learned windows (``proxy.context.records.learned``) shared through the suite's store: a limit one
process learned from an upstream refusal caps the model's window on the others, is never
loosened by a higher one, and counts for its time to live only. Two ``Store`` objects on one
target stand for two processes."""

from __future__ import annotations

from proxy.context.records.learned import LearnedWindows
from proxy.context.tokens.window import WindowResolver
from proxy.policy.model import Policy
from proxy.store import Store
from proxy.store.health import StoreHealth


async def test_a_limit_learned_by_one_process_caps_the_others(
        two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    policy = Policy(models={"my-llama": 32_768})
    mine = WindowResolver(None, litellm_lookup=None, shared=LearnedWindows(a))
    theirs = WindowResolver(None, litellm_lookup=None, shared=LearnedWindows(b, refresh_s=0))
    assert await theirs.resolve("my-llama", policy) == (32_768, "policy")
    await mine.learn_shared("my-llama", 16_000)
    assert await theirs.resolve("my-llama", policy) == (16_000, "learned")
    await theirs.learn_shared("my-llama", 20_000)  # higher: never loosens what is stored
    await mine.learn_shared("my-llama", 12_000)
    assert await theirs.resolve("my-llama", policy) == (12_000, "learned")
    assert a.read_one("SELECT tokens FROM learned_windows WHERE model = 'my-llama'")[0] == 12_000


async def test_a_stored_limit_counts_for_its_ttl_only(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    await LearnedWindows(a).save("my-llama", 8_000)
    assert await LearnedWindows(b, refresh_s=0).get("my-llama") == 8_000
    assert await LearnedWindows(b, refresh_s=0, ttl_s=0).get("my-llama") is None
    await LearnedWindows(a, ttl_s=0).save("my-llama", 20_000)  # the old one has run out
    assert await LearnedWindows(b, refresh_s=0).get("my-llama") == 20_000


def unreachable() -> None:
    raise ConnectionError("the database does not answer")


async def test_while_the_store_is_away_the_last_read_stands(
        two_stores: tuple[Store, Store]) -> None:
    a, _ = two_stores
    learned = LearnedWindows(a, refresh_s=0)
    await learned.save("my-llama", 9_000)
    assert await learned.get("my-llama") == 9_000
    a.health = StoreHealth(unreachable)
    a.health.failed("a test outage")
    try:
        assert await learned.get("my-llama") == 9_000  # no read possible: the last one
        await learned.save("my-llama", 7_000)  # this process knows; nothing raised
        assert await learned.get("my-llama") == 7_000
    finally:
        await a.health.close()
