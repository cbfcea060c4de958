"""A resent history is not checked twice, and what is new in it always is."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from factories import assistant, system, tool_call, tool_result, tool_turn, user

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
    seen: list[int] = []
    real = parse._check_message

    def counting(i: int, msg: Any) -> str:
        seen.append(i)
        return real(i, msg)

    monkeypatch.setattr(parse, "_check_message", counting)
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
    shorter = chat(msgs[:2], checked)  # a prefix of a checked list is checked again, whole
    assert shorter.repeats is None


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
