"""The Responses adapter: items read for the stages and back, reasoning items never edited."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.context.adapters import AdapterError
from proxy.context.adapters.openai_responses import read

REASONING = {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "gAAAA-opaque"}


def agent_items() -> dict[str, Any]:
    return {"model": "gpt-x", "instructions": "You are a coder.",
            "tools": [{"type": "function", "name": "read_file", "parameters": {}},
                      {"type": "web_search"}],
            "input": [
                {"role": "user", "content": "Fix the bug."},
                REASONING,
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read_file",
                 "arguments": '{"path": "a.py"}'},
                {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "read_file",
                 "arguments": '{"path": "b.py"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "A" * 40},
                {"type": "function_call_output", "call_id": "c2", "output": "B" * 40},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Done."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "Thanks."}]}]}


def test_items_as_chat_messages() -> None:
    a = read(agent_items())
    # The turn that began with the reasoning item holds its calls and the closing text.
    assert [m["role"] for m in a.messages] == ["system", "user", "assistant", "tool", "tool",
                                               "user"]
    assert [c["id"] for c in a.messages[2]["tool_calls"]] == ["c1", "c2"]
    assert a.messages[2]["content"] == "Done." and a.messages[5]["content"] == "Thanks."
    assert a.tools is not None and [t["function"]["name"] for t in a.tools] == ["read_file"]


def test_kept_items_go_back_as_they_came_reasoning_included() -> None:
    body = agent_items()
    a = read(body)
    out = a.encode(a.messages)
    assert all(x is y for x, y in zip(out["input"], body["input"], strict=True))
    assert len(out["input"]) == len(body["input"]) and out["instructions"] == body["instructions"]


def test_a_masked_output_and_a_summary() -> None:
    body = agent_items()
    a = read(body)
    masked = [dict(m, content="[tool output cleared]") if m.get("tool_call_id") == "c2" else m
              for m in a.messages]
    sent = a.encode(masked)["input"]
    assert sent[5] == {"type": "function_call_output", "call_id": "c2",
                       "output": "[tool output cleared]"}
    assert sent[1] is REASONING and json.dumps(sent[1]) == json.dumps(REASONING)
    summary = {"role": "user", "content": "<summary>earlier</summary>"}
    compacted = a.encode([a.messages[0], a.messages[1], summary, a.messages[5]])["input"]
    assert compacted == [body["input"][0], {"type": "message", "role": "user",
                                            "content": "<summary>earlier</summary>"},
                         body["input"][7]]


def test_a_string_input_is_left_alone() -> None:
    body = {"model": "m", "instructions": "Hi", "input": "Hello"}
    a = read(body)
    assert [m["role"] for m in a.messages] == ["system", "user"]
    assert a.encode(a.messages) is body


def test_summary_prompt_in_the_apis_shape() -> None:
    body = agent_items()
    a = read(body)
    ask = {"role": "user", "content": "Summarize."}
    doc = a.prompt([*a.messages[:5], ask])
    assert doc["instructions"] == "You are a coder."
    assert doc["input"][:7] == body["input"][:7]
    assert doc["input"][7] == {"type": "message", "role": "user", "content": "Summarize."}


@pytest.mark.parametrize(("items", "where"), [
    ([{"type": "function_call_output", "call_id": "x", "output": "o"}], "input[0]"),
    ([{"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"}], "input"),
    ([{"type": ["message"], "role": "user", "content": "x"}], "input[0].type"),
    ([{"type": "function_call", "name": "f"}], "input[0]"),
    (["text"], "input[0]"),
])
def test_broken_items_name_where(items: list[Any], where: str) -> None:
    with pytest.raises(AdapterError) as info:
        read({"model": "m", "input": items})
    assert info.value.param == where


@pytest.mark.parametrize(("extra", "items", "reasons"), [
    ({}, [{"role": "user", "content": "hi"}], False),
    ({"reasoning": {"effort": "low"}}, [{"role": "user", "content": "hi"}], True),
    ({}, [{"role": "user", "content": "hi"},
          {"type": "reasoning", "id": "rs_1", "summary": []},
          {"type": "message", "role": "assistant",
           "content": [{"type": "output_text", "text": "ok"}]},
          {"role": "user", "content": "go on"}], True),
])
def test_read_says_whether_the_request_carries_reasoning(
        extra: dict[str, Any], items: list[Any], reasons: bool) -> None:
    body = {"model": "gpt-5.6", "input": items, **extra}
    assert read(body).reasoning is reasons
