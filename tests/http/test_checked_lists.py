"""A resent history is not checked twice, and what is new in it always is."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from factories import assistant, system, tool_call, tool_result, tool_turn, user

from proxy.context import checked as checked_module
from proxy.context.checked import CheckedLists
from proxy.errors import ApiError
from proxy.http import parse
from proxy.http.parse import check_chat


def chat(messages: list[Any], checked: CheckedLists) -> Any:
    body = {"model": "m", "messages": messages}
    return check_chat(orjson.dumps(body), body, checked)


def history() -> list[Any]:
    return [system("S"), user("task"), *tool_turn("read_file", "out"), assistant("done")]


def test_only_the_new_messages_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = CheckedLists()
    msgs = history()
    first = chat(msgs, checked)
    assert first.repeats is None
    seen = spy(monkeypatch)
    grown = [*msgs, user("more"), assistant("ok")]
    second = chat(grown, checked)
    assert second.repeats is first.messages and seen == [len(msgs), len(msgs) + 1]


@pytest.mark.parametrize("bad", [
    {"role": "robot", "content": "x"},
    {"role": "tool", "tool_call_id": "nobody", "content": "x"},
    {"role": "assistant", "content": None, "tool_calls": [tool_call("f", call_id="open")]},
])
def test_what_is_new_is_still_refused(bad: dict[str, Any]) -> None:
    checked = CheckedLists()
    msgs = history()
    chat(msgs, checked)
    with pytest.raises(ApiError) as err:
        chat([*msgs, bad], checked)
    assert err.value.status == 400


def test_a_changed_history_is_checked_whole() -> None:
    checked = CheckedLists()
    msgs = history()
    chat(msgs, checked)
    broken = [*msgs[:2], {"role": "tool", "tool_call_id": "x", "content": "orphan"}, *msgs[2:]]
    with pytest.raises(ApiError) as err:
        chat(broken, checked)
    assert err.value.param == "messages" and "no open call" in err.value.message
    shorter = chat(msgs[:2], checked)  # a prefix of a checked list: all of it passed before
    assert shorter.repeats is not None and shorter.shared == 2


def spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indices of the messages whose shape gets checked from now on."""
    seen: list[int] = []
    real = parse._check_message

    def counting(i: int, msg: Any) -> str:
        seen.append(i)
        return real(i, msg)

    monkeypatch.setattr(parse, "_check_message", counting)
    return seen


def test_a_new_last_message_is_the_only_one_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = CheckedLists()
    msgs = [*history(), user("question 1")]
    chat(msgs, checked)
    seen = spy(monkeypatch)
    changed = chat([*msgs[:-1], user("question 2")], checked)
    assert seen == [len(msgs) - 1] and changed.shared == len(msgs) - 1
    with pytest.raises(ApiError) as err:
        chat([*msgs[:-1], {"role": "robot", "content": "x"}], checked)
    assert err.value.param == f"messages[{len(msgs) - 1}].role"


def test_a_changed_earlier_message_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = CheckedLists()
    msgs = history()  # system, user, assistant calling, its result, assistant
    chat(msgs, checked)
    seen = spy(monkeypatch)
    edited = [*msgs[:2], {**msgs[2], "content": "thinking"}, *msgs[3:]]
    assert chat(edited, checked).shared == 2 and seen == [2, 3, 4]
    bad = [*msgs[:2], {**msgs[2], "tool_calls": [{"id": 5}]}, *msgs[3:]]
    with pytest.raises(ApiError) as err:
        chat(bad, checked)
    assert err.value.param == "messages[2].tool_calls[0]"


def test_a_shared_call_is_checked_again_with_its_changed_result() -> None:
    checked = CheckedLists()
    msgs = history()
    chat(msgs, checked)
    orphan = [*msgs[:3], {"role": "tool", "tool_call_id": "nobody", "content": "x"}]
    with pytest.raises(ApiError) as err:  # the call is shared, its result is not
        chat(orphan, checked)
    assert "no open call" in err.value.message
    with pytest.raises(ApiError) as err:  # the call shared, its result dropped
        chat(msgs[:3], checked)
    assert "never answered" in err.value.message


def test_conversations_that_share_a_system_prompt_keep_their_own_lists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked = CheckedLists()
    one = [system("S"), user("task one"), assistant("a")]
    two = [system("S"), user("task two"), assistant("b")]
    chat(one, checked)
    chat(two, checked)
    seen = spy(monkeypatch)
    assert chat([*one, user("more")], checked).repeats is not None
    assert chat([*two, user("more")], checked).repeats is not None
    assert seen == [3, 3]


def test_open_calls_at_the_end_of_new_messages_are_refused() -> None:
    checked = CheckedLists()
    msgs = history()
    chat(msgs, checked)
    call = tool_call("f", call_id="c9")
    ok = chat([*msgs, assistant(None, call), tool_result(call)], checked)
    assert ok.repeats is not None


def test_the_memory_is_bounded() -> None:
    checked = CheckedLists(max_bytes=10_000, max_lists=2)
    for n in range(5):
        chat([system(f"S{n}"), user("task")], checked)
    assert chat([system("S4"), user("task"), assistant("x")], checked).repeats is not None
    assert chat([system("S0"), user("task"), assistant("x")], checked).repeats is None
    tiny = CheckedLists(max_bytes=10)  # larger than the bound: not kept at all
    chat([system("S"), user("task")], tiny)
    assert chat([system("S"), user("task"), assistant("x")], tiny).repeats is None


def test_the_same_bytes_again_are_known_without_comparing_the_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked = CheckedLists()
    msgs = history()
    first = chat(msgs, checked)
    compared: list[int] = []
    real = checked_module.common_prefix

    def counting(a: Any, b: Any) -> int:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(checked_module, "common_prefix", counting)
    seen = spy(monkeypatch)
    again = chat(orjson.loads(orjson.dumps(msgs)), checked)  # a retry: the same bytes
    assert again.repeats is first.messages and again.shared == len(msgs)
    assert compared == [] and seen == []
    grown = chat([*msgs, user("more")], checked)  # a new body: compared as before
    assert grown.shared == len(msgs) and compared == [1]
