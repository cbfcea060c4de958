"""The OpenAI message-ordering validator."""

from __future__ import annotations

from typing import Any

import pytest
from factories import assistant, developer, parallel_turn, system, tool_call, tool_result, user

from proxy.context.stages.ordering import OrderingCheck, ordering_problems


def test_valid_conversation() -> None:
    a, b = tool_call("read_file", call_id="a"), tool_call("grep", call_id="b")
    msgs = [system(), developer(), user(), assistant(None, a, b), tool_result(b), tool_result(a),
            assistant("done"), user("more"), *parallel_turn({"x": "1", "y": "2", "z": "3"}),
            {"role": "function", "name": "legacy", "content": "x"}, assistant("ok")]
    assert ordering_problems(msgs) == []


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([{"role": "robot", "content": "x"}], "invalid role"),
        (["not a dict"], "invalid role"),
        ([user(), tool_result("nope")], "answers no open call"),
        ([assistant(None, tool_call("f", call_id="a")), user()], "not answered before"),
        ([assistant(None, tool_call("f", call_id="a")), tool_result("a"), tool_result("a")],
         "answers no open call"),
        ([assistant(None, tool_call("f", call_id="a"), tool_call("g", call_id="b")),
          tool_result("a"), user()], "['b'] not answered"),
        ([assistant(None, tool_call("f", call_id="a")), user(), tool_result("a")],
         "answers no open call"),
        ([assistant(None, tool_call("f", call_id="a"))], "never answered"),
        ([{"role": "assistant", "content": None, "tool_calls": []}], "non-empty list"),
        ([{"role": "assistant", "tool_calls": [{"type": "function"}]}], "missing id"),
        ([assistant(None, tool_call("f", call_id="a"), tool_call("g", call_id="a")),
          tool_result("a")], "duplicate id"),
    ],
)
def test_violations(messages: list[Any], fragment: str) -> None:
    problems = ordering_problems(messages)
    assert any(fragment in p for p in problems), problems


def test_fed_one_at_a_time_it_finds_the_same() -> None:
    """The request parser feeds messages during its own walk: same problems, same order."""
    msgs = [user(), tool_result("x"), assistant(None, tool_call("f", call_id="a")), user(),
            {"role": "robot"}, assistant(None, tool_call("g", call_id="b"))]
    check = OrderingCheck()
    for i, m in enumerate(msgs):
        check.feed(i, m)
    assert check.finish() == ordering_problems(msgs)
    assert len(ordering_problems(msgs)) == 4


def test_trailing_calls_are_refused() -> None:
    msgs = [user(), assistant(None, tool_call("f", call_id="a"))]
    assert ordering_problems(msgs) == ["messages[1]: tool calls ['a'] never answered"]
