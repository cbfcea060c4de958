"""The message lists already checked (``proxy.context.checked``): how many leading messages two
lists share, where the ordering check may start afresh, and the bounded memory of lists by
their opening messages."""

from __future__ import annotations

from proxy.context.checked import CheckedLists, common_prefix, restart_point

SYS = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "task"}
CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}
RESULT = {"role": "tool", "tool_call_id": "c", "content": "r"}
SAID = {"role": "assistant", "content": "done"}


def test_common_prefix_in_every_case() -> None:
    a = [1, 2, 3, 4]
    assert common_prefix(a, [*a, 5]) == 4 and common_prefix([*a, 5], a) == 4
    assert common_prefix(a, [1, 2, 3, 9]) == 3  # only the last differs
    assert common_prefix(a, [1, 9, 3, 4]) == 1 and common_prefix(a, [0]) == 0
    assert common_prefix([], a) == 0


def test_the_check_restarts_after_the_last_message_with_no_call_open() -> None:
    messages = [SYS, USER, CALL, RESULT, SAID, CALL, RESULT]
    assert restart_point(messages, 7) == 5  # the open call at 5 is checked again
    assert restart_point(messages, 4) == 2
    assert restart_point(messages, 0) == 0


def test_lists_are_found_by_their_opening_and_memory_is_bounded() -> None:
    lists = CheckedLists(max_bytes=100, max_lists=2)
    first = [SYS, USER, SAID]
    lists.remember(first, b"x" * 40)
    grown = [*first, {"role": "user", "content": "more"}]
    assert lists.shared(grown) == (first, 3) and lists.repeated(grown) is first
    assert lists.shared([SYS, {"role": "user", "content": "other"}]) == (None, 0)
    lists.remember([SYS, {"role": "user", "content": "b"}], b"x" * 40)
    lists.remember([SYS, {"role": "user", "content": "c"}], b"x" * 40)  # over both: oldest out
    assert lists.shared(grown) == (None, 0)
    lists.remember([{"role": "user", "content": [{"type": "text"}]}], b"x")  # no key: not kept
    assert lists.shared([{"role": "user", "content": [{"type": "text"}]}]) == (None, 0)
