"""Each conversation's last request: only what is new gets counted."""

from __future__ import annotations

from typing import Any

from factories import assistant, system, tool_turn, user, words

from proxy.context.history import NOTHING, History
from proxy.context.tokens.counter import TokenCounter

MODEL = "gpt-4o"


def history() -> list[Any]:
    return [system("S"), user("task"), *tool_turn("read_file", words(200)), assistant("done")]


def remember(h: History, key: str, msgs: list[Any], verified: Any = None) -> None:
    pairs = h.recall(key, msgs, MODEL).pairs_for(h.counter, msgs, MODEL)
    h.remember(key, msgs, MODEL, pairs, verified, 1000)


def test_a_grown_list_reuses_the_counts_of_what_repeats() -> None:
    counter = TokenCounter()
    h = History(counter)
    msgs = history()
    assert h.recall("c1", msgs, MODEL) is NOTHING
    remember(h, "c1", msgs)
    grown = [*msgs, user("more")]
    known = h.recall("c1", grown, MODEL)
    assert known.unchanged == len(msgs)
    before = counter.encoded_messages
    pairs = known.pairs_for(counter, grown, MODEL)
    assert counter.encoded_messages == before + 1  # only the new message was encoded
    assert pairs == counter.token_pairs(grown, MODEL)


def test_another_model_or_conversation_starts_over() -> None:
    h = History(TokenCounter())
    msgs = history()
    remember(h, "c1", msgs)
    assert h.recall("c1", [user("other"), *msgs[1:]], MODEL) is NOTHING
    assert h.recall("c1", msgs, "gpt-4").unchanged == 0
    assert h.recall("c2", msgs, MODEL) is NOTHING


def test_a_changed_earlier_message_is_counted_again() -> None:
    counter = TokenCounter()
    h = History(counter)
    msgs = history()
    remember(h, "c1", msgs)
    edited = [*msgs[:2], {**msgs[2], "content": words(300)}, *msgs[3:], user("more")]
    known = h.recall("c1", edited, MODEL)
    assert known.unchanged == 2  # the first difference: what follows it is counted again
    before = counter.encoded_messages
    pairs = known.pairs_for(counter, edited, MODEL)
    assert counter.encoded_messages == before + 2  # the edited message and the new one
    assert pairs == TokenCounter().token_pairs(edited, MODEL)
    assert pairs[2] != h.recall("c1", msgs, MODEL).pairs[2]


def test_a_new_last_message_reuses_every_count_before_it() -> None:
    counter = TokenCounter()
    h = History(counter)
    msgs = [*history(), user("first question")]
    remember(h, "c1", msgs)
    changed = [*msgs[:-1], user("another question, " + words(50))]
    known = h.recall("c1", changed, MODEL)
    assert known.unchanged == len(msgs) - 1
    before = counter.encoded_messages
    pairs = known.pairs_for(counter, changed, MODEL)
    assert counter.encoded_messages == before + 1
    assert pairs == TokenCounter().token_pairs(changed, MODEL)
    shorter = h.recall("c1", msgs[:3], MODEL)  # a shorter resend shares all it has
    assert shorter.unchanged == 3 and shorter.pairs == known.pairs[:3]


def test_a_known_repeat_spares_the_comparison() -> None:
    h = History(TokenCounter())
    msgs = history()
    remember(h, "c1", msgs)
    grown = [*msgs, user("more")]
    assert h.recall("c1", grown, MODEL, repeats=msgs).unchanged == len(msgs)
    assert h.recall("c1", grown, MODEL, repeats=list(msgs)).unchanged == len(msgs)
    edited = [*msgs[:3], user("edited")]
    assert h.recall("c1", edited, MODEL, repeats=msgs, shared=3).unchanged == 3
    assert h.recall("c1", edited, MODEL, repeats=list(msgs), shared=3).unchanged == 3


def test_a_verified_prefix_is_carried_while_it_repeats() -> None:
    h = History(TokenCounter())
    msgs = history()
    remember(h, "c1", msgs, verified=("abc", 2))
    assert h.recall("c1", [*msgs, user("x")], MODEL).verified == ("abc", 2)
    h.verify("c1", ("def", 4))
    assert h.recall("c1", [*msgs, user("x")], MODEL).verified == ("def", 4)
    assert h.recall("c1", msgs[:1], MODEL).verified is None  # covered more than repeats


def test_memory_is_bounded_by_size() -> None:
    h = History(TokenCounter(), max_bytes=2500)
    msgs = history()
    for n in range(4):
        h.remember(f"c{n}", msgs, MODEL, [], None, 1000)
    assert h.recall("c0", msgs, MODEL) is NOTHING  # the oldest went first
    assert h.recall("c3", msgs, MODEL).unchanged == len(msgs)
