"""What the real Responses API refuses (``proxy.testing.fake.strict_responses``), in its words: item
types and roles it does not know, a call without its output (or an output without its call),
and items issued after a reasoning item sent without it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.fake.strict_apis import Refusal
from proxy.testing.fake.strict_responses import check_responses

USER = {"role": "user", "content": "hi"}
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


def check(*items: Any, reasoning_of: dict[str, str] | None = None, **extra: Any
          ) -> Refusal | None:
    return check_responses({"input": list(items), **extra}, reasoning_of or {})


def test_a_well_formed_input_passes() -> None:
    assert check(USER, CALL, OUTPUT, {"role": "assistant", "content": [
        {"type": "output_text", "text": "done"}]}) is None
    assert check_responses({"input": "just text"}, {}) is None


@pytest.mark.parametrize(("items", "message", "param"), [
    ([{"type": "robot"}], "Invalid value: 'robot'. Supported values are: ", "input[0].type"),
    ([{"role": "tool", "content": "x"}],
     "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', and "
     "'user'.", "input[0].role"),
    ([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
     "Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', and "
     "'input_file'.", "input[0].content[0]"),
    (["text"], "Invalid type for 'input[0]': expected an object.", "input[0]"),
])
def test_unknown_kinds_are_refused_in_openais_words(items: list[Any], message: str,
                                                    param: str) -> None:
    refusal = check(*items)
    assert refusal is not None and refusal.message.startswith(message)
    assert refusal.param == param


def test_calls_and_outputs_come_in_pairs_unless_stored_items_come_first() -> None:
    assert check(USER, CALL) == Refusal("No tool output found for function call c1.", "input")
    assert check(USER, OUTPUT, CALL) == Refusal(
        "No tool call found for function call output with call_id c1.", "input")
    assert check(OUTPUT, previous_response_id="resp_1") is None
    assert check(OUTPUT, conversation="conv_1") is None


def test_issued_items_need_their_reasoning_and_reasoning_its_follower() -> None:
    issued = {"fc_9": "rs_1"}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    call = {**CALL, "id": "fc_9"}
    assert check(USER, reasoning, call, OUTPUT, reasoning_of=issued) is None
    missing = check(USER, call, OUTPUT, reasoning_of=issued)
    assert missing is not None and "without its required 'reasoning' item: 'rs_1'" in \
        missing.message
    alone = check(USER, reasoning, reasoning_of=issued)
    assert alone is not None and "without its required following item" in alone.message
    new_turn = check(USER, reasoning, USER, call, OUTPUT, reasoning_of=issued)
    assert new_turn is not None  # a user message starts a turn: the reasoning is left behind


def test_newer_item_types_are_known() -> None:
    assert check(USER, {"type": "compaction", "encrypted_content": "zzz"},
                 {"type": "compaction_trigger"}, {"type": "configuration_update"},
                 {"type": "additional_tools", "tools": []}, {"type": "program", "id": "p1"},
                 {"type": "program_output", "id": "p2"}, USER) is None


def test_items_whose_reasoning_the_fake_dropped_need_it_no_more() -> None:
    call = {**CALL, "id": "fc_9"}
    assert check(USER, call, OUTPUT, reasoning_of={"fc_9": "rs_1"}) is not None
    assert check_responses({"input": [USER, call, OUTPUT]}, {"fc_9": "rs_1"}, {"rs_1"}) is None
