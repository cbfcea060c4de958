"""``Recent``: the byte-bounded cache behind the checked lists and the conversations' history."""

from __future__ import annotations

import threading

from proxy.context.recent import Recent


def test_the_oldest_stored_go_first_when_the_bytes_run_over() -> None:
    cache: Recent[str, int] = Recent(max_bytes=100, max_items=10)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # a read does not make it newer
    cache.put("c", 3, 40)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 2, 3)
    assert (cache.size, len(cache)) == (80, 2)


def test_storing_again_makes_a_key_the_newest_and_counts_its_new_size() -> None:
    cache: Recent[str, int] = Recent(max_bytes=100, max_items=2)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("a", 9, 30)
    cache.put("c", 3, 10)  # over max_items: b, now the oldest, goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (9, None, 3)
    assert cache.size == 40


def test_a_value_larger_than_the_bound_is_not_kept() -> None:
    cache: Recent[str, int] = Recent(max_bytes=10, max_items=5)
    cache.put("big", 1, 11)
    assert (cache.get("big"), cache.size, len(cache)) == (None, 0, 0)


def test_update_changes_a_held_value_in_place_and_ignores_an_absent_key() -> None:
    cache: Recent[str, int] = Recent(max_bytes=100, max_items=2)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.update("a", lambda v: v + 100)
    cache.update("gone", lambda v: v + 100)
    assert (cache.get("a"), cache.get("gone"), cache.size) == (101, None, 20)
    cache.put("c", 3, 10)  # the update kept a's place: it is still the oldest
    assert cache.get("a") is None


def test_concurrent_puts_keep_the_size_exact() -> None:
    cache: Recent[int, int] = Recent(max_bytes=5_000, max_items=1_000)

    def work(start: int) -> None:
        for i in range(start, start + 2_000):
            cache.put(i % 300, i, 7)

    threads = [threading.Thread(target=work, args=(n * 2_000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.size == 7 * len(cache) and len(cache) <= 300
