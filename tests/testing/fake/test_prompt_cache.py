"""The fake upstream's prompt cache (``proxy.testing.fake.prompt_cache``): a prompt is served from
cache for the longest run of leading messages it shares with a recent one of the same key,
model, route and tools, in the provider's steps; another mode shares at most its head."""

from __future__ import annotations

from typing import Any

from proxy.testing.fake.prompt_cache import PromptCache

M = [{"role": "user", "content": f"m{i}"} for i in range(6)]


def body(n: int, model: str = "gpt-4o", tools: Any = None) -> dict[str, Any]:
    return {"model": model, "messages": M[:n], "tools": tools}


def ask(cache: PromptCache, b: dict[str, Any], key: str = "k", **kw: Any) -> int:
    return cache.cached_tokens(key, b, [600] * len(b["messages"]), 100, **kw)


def test_a_grown_prompt_is_served_up_to_what_it_shares() -> None:
    cache = PromptCache()
    assert ask(cache, body(2)) == 0  # nothing seen yet
    assert ask(cache, body(4)) == (100 + 1200) // 128 * 128  # tools + two shared messages
    assert ask(cache, body(4)) == (100 + 2400) // 128 * 128


def test_keys_models_routes_and_tools_keep_caches_apart() -> None:
    cache = PromptCache()
    ask(cache, body(3))
    assert ask(cache, body(3), key="other") == 0
    assert ask(cache, body(3, model="gpt-4.1")) == 0
    assert ask(cache, body(3), route="/v1/responses") == 0
    assert ask(cache, body(3, tools=[{"name": "f"}])) == 0
    assert ask(cache, body(3)) > 0


def test_another_mode_shares_at_most_its_head_and_little_is_never_cached() -> None:
    cache = PromptCache()
    ask(cache, body(4), mode="auto")
    assert ask(cache, body(4), mode="any", head=2) == (100 + 1200) // 128 * 128
    small = PromptCache()
    small.cached_tokens("k", body(2), [100, 100], 10)
    assert small.cached_tokens("k", body(2), [100, 100], 10) == 0  # under 1,024 tokens
    off = PromptCache(enabled=False)
    ask(off, body(3))
    assert ask(off, body(3)) == 0 and off.written(5000, 0) == 0


def test_written_is_what_the_cache_newly_stores() -> None:
    cache = PromptCache()
    assert cache.written(1000, 0) == 0
    assert cache.written(5000, 1024) == 4992 - 1024
    assert cache.written(5000, 4992) == 0


def test_an_idle_gap_past_the_cache_life_forgets_everything() -> None:
    cache = PromptCache()
    ask(cache, body(3))
    assert ask(cache, body(4)) > 0
    cache.expire()
    assert ask(cache, body(5)) == 0  # cold: written again in full
    assert ask(cache, body(6)) > 0
