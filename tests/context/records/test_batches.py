"""Usage batches (``proxy.context.records.batches``): a batch whose write had an unknown outcome
is offered again under its id and applied once whether or not it had committed; one that
surely failed is folded into the next; a batch's newest turn wins; old ids are purged."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from proxy.context.records.batches import BATCH_IDS_KEPT_S, TOTALS, Batch, UsageBook, purge, write
from proxy.context.records.compactions import Records
from proxy.store import Store, StoreUnavailable
from proxy.store.base import CommitUnknown

KEY = ("acme", "conv", "m")


def count(book: UsageBook, prompt: int) -> None:
    book.add(KEY, prompt, prompt // 2, written=0, summary=False, spent=0.5, without=1.0)


def in_doubt() -> StoreUnavailable:
    error = StoreUnavailable("OperationalError at commit")
    error.__cause__ = CommitUnknown()
    return error


def totals(store: Store) -> dict[str, float]:
    row = store.read(f"SELECT {', '.join(TOTALS)} FROM usage_totals WHERE conversation = ?",
                     ["conv"])[0]
    return dict(zip(TOTALS, row, strict=True))


def flush(store: Store, book: UsageBook, commits: bool = True,
          error: Callable[[], BaseException] | None = None) -> list[Batch]:
    batches = book.take()
    if commits:
        store.atomic(write, batches, Records._touch)
    if error is None:
        book.written(batches)
    else:
        book.failed(batches, error())
    return batches


def test_a_batch_in_doubt_that_had_committed_is_not_counted_twice(
        new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    count(book, 1000)
    first = flush(store, book, commits=True, error=in_doubt)  # committed, answer lost
    assert book.unconfirmed == first and book.pending() == 1
    count(book, 10)
    again = flush(store, book)
    assert again[0] is first[0] and len(again) == 2
    t = totals(store)
    assert (t["requests"], t["prompt_tokens"], t["cost_spent_usd"]) == (2, 1010, 1.0)
    assert book.pending() == 0 and not book.take()


def test_a_write_still_running_when_the_flush_gave_up_on_it_is_in_doubt(
        new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    count(book, 1000)
    still_running: Future[None] = Future()  # the store was found down while it ran
    first = flush(store, book, commits=True,
                  error=lambda: StoreUnavailable("deadline", pending=still_running, late=True))
    assert book.unconfirmed == first
    flush(store, book)
    assert totals(store)["requests"] == 1


def test_a_batch_in_doubt_that_had_not_committed_is_applied_on_the_next_flush(
        new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    count(book, 1000)
    flush(store, book, commits=False, error=in_doubt)
    flush(store, book)
    t = totals(store)
    assert (t["requests"], t["prompt_tokens"]) == (1, 1000)


def test_a_write_that_surely_failed_is_folded_into_the_next_batch(
        new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    count(book, 1000)
    flush(store, book, commits=False, error=lambda: StoreUnavailable("the store is down"))
    assert book.unconfirmed == []
    count(book, 10)
    batches = flush(store, book)
    assert len(batches) == 1
    assert totals(store)["prompt_tokens"] == 1010


def test_the_newest_turn_of_merged_batches_wins(new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    book.hourly.turn("acme", None, "conv", "old-public", 100, 90, "none", now=1000.0)
    count(book, 100)
    flush(store, book, commits=False, error=in_doubt)
    book.hourly.turn("acme", None, "conv", "new-public", 300, 200, "none", now=2000.0)
    count(book, 300)
    flush(store, book)
    row = store.read("SELECT public_id, last_tokens_before FROM conversations WHERE id = ?",
                     ["conv"])[0]
    assert (row[0], row[1]) == ("new-public", 300)
    assert store.read_one("SELECT SUM(requests) FROM usage_hourly")[0] == 2


def test_batch_ids_are_purged_after_they_can_no_longer_be_offered_again(
        new_store: Callable[[str], Store]) -> None:
    store, book = new_store("u.db"), UsageBook()
    count(book, 1)
    store.atomic(write, book.take(), Records._touch, 1000.0)
    assert store.atomic(purge, 1000.0 + BATCH_IDS_KEPT_S - 1) == 0
    assert store.atomic(purge, 1000.0 + BATCH_IDS_KEPT_S) == 1
