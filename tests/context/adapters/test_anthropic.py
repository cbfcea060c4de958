"""The Anthropic Messages adapter: read for the stages, and back, with every message the stages
kept returned as the client's own object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.context.adapters import AdapterError
from proxy.context.adapters.anthropic import read

THINKING = {"type": "thinking", "thinking": "Let me look at the file.", "signature": "sig=="}


def tool_loop() -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100,
            "system": [{"type": "text", "text": "You are a coder.",
                        "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "read_file", "description": "Read",
                       "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "Fix the bug."},
                {"role": "assistant", "content": [
                    THINKING, {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "tu_1", "name": "read_file",
                     "input": {"path": "a.py"}},
                    {"type": "tool_use", "id": "tu_2", "name": "read_file",
                     "input": {"path": "b.py"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "A" * 50,
                     "cache_control": {"type": "ephemeral"}},
                    {"type": "tool_result", "tool_use_id": "tu_2",
                     "content": [{"type": "text", "text": "B" * 50}], "is_error": True},
                    {"type": "text", "text": "Both files."}]},
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "Thanks."}]}


def test_read_gives_chat_style_messages_and_tools() -> None:
    a = read(tool_loop())
    assert [m["role"] for m in a.messages] == ["system", "user", "assistant", "tool", "tool",
                                               "user", "assistant", "user"]
    assert a.messages[0]["content"] == "You are a coder."
    call = a.messages[2]["tool_calls"][1]
    assert (call["id"], call["function"]["name"]) == ("tu_2", "read_file")
    assert json.loads(call["function"]["arguments"]) == {"path": "b.py"}
    assert a.messages[4] == {"role": "tool", "tool_call_id": "tu_2", "content": "B" * 50}
    assert a.messages[5] == {"role": "user", "content": "Both files."}
    assert a.tools is not None and a.tools[0]["function"]["name"] == "read_file"


def test_what_the_stages_keep_goes_back_as_the_clients_objects() -> None:
    body = tool_loop()
    a = read(body)
    out = a.encode(a.messages)
    assert all(x is y for x, y in zip(out["messages"], body["messages"], strict=True))
    assert out["system"] is body["system"] and out["tools"] is body["tools"]


def test_a_masked_result_keeps_its_block_but_the_content() -> None:
    body = tool_loop()
    a = read(body)
    masked = [dict(m, content="[tool output cleared: 50 tokens from read_file]")
              if m.get("tool_call_id") == "tu_1" else m for m in a.messages]
    sent = a.encode(masked)["messages"]
    blocks = sent[2]["content"]
    assert blocks[0] == {"type": "tool_result", "tool_use_id": "tu_1",
                         "content": "[tool output cleared: 50 tokens from read_file]",
                         "cache_control": {"type": "ephemeral"}}
    assert blocks[1] is body["messages"][2]["content"][1]  # the other result, untouched
    assert blocks[2] is body["messages"][2]["content"][2]
    assert sent[1] is body["messages"][1]  # the assistant turn, thinking block and all
    assert json.dumps(sent[1]["content"][0]) == json.dumps(THINKING)


def test_a_compacted_list_keeps_the_head_then_the_summary() -> None:
    body = tool_loop()
    a = read(body)
    summary = {"role": "user", "content": "<summary>Earlier: fixed a.py</summary>"}
    out = a.encode([a.messages[0], a.messages[1], summary, a.messages[6], a.messages[7]])
    assert out["messages"][0] is body["messages"][0]
    assert out["messages"][1] == summary
    assert out["messages"][2:] == body["messages"][3:]
    assert out["system"] is body["system"]


def test_only_the_kept_parts_of_a_split_message_go_back() -> None:
    body = tool_loop()
    a = read(body)
    out = a.encode([a.messages[0], {"role": "user", "content": "summary"}, a.messages[5]])
    assert out["messages"][1] == {"role": "user", "content": [
        {"type": "text", "text": "Both files."}]}


def test_a_summary_prompt_keeps_system_or_replaces_it() -> None:
    body = tool_loop()
    a = read(body)
    instruction = {"role": "user", "content": "Summarize the conversation above."}
    doc = a.prompt([*a.messages[:6], instruction])
    assert doc["system"] is body["system"]
    assert doc["messages"][:3] == body["messages"][:3] and doc["messages"][3] == instruction
    fresh = a.prompt([{"role": "system", "content": "You summarize."},
                      {"role": "user", "content": "the transcript"}])
    assert fresh == {"system": "You summarize.",
                     "messages": [{"role": "user", "content": "the transcript"}]}


@pytest.mark.parametrize(("messages", "where"), [
    ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                         "input": {}}]},
      {"role": "user", "content": "no result"}], "messages.1"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope",
                                    "content": "x"}]}], "messages.0.content.0"),
    (["not a message"], "messages.0"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                         "input": [1]}]}], "messages.0.content.0.input"),
    ([], "messages"),
])
def test_broken_requests_name_where(messages: list[Any], where: str) -> None:
    with pytest.raises(AdapterError) as info:
        read({"model": "m", "max_tokens": 1, "messages": messages})
    assert info.value.param == where


@pytest.mark.parametrize(("extra", "messages", "reasons"), [
    ({}, [{"role": "user", "content": "hi"}], False),
    ({"thinking": {"type": "disabled"}}, [{"role": "user", "content": "hi"}], False),
    ({"thinking": {"type": "adaptive"}}, [{"role": "user", "content": "hi"}], True),
    ({}, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "ok"}]},
          {"role": "user", "content": "go on"}], True),
])
def test_read_says_whether_the_request_carries_thinking(
        extra: dict[str, Any], messages: list[Any], reasons: bool) -> None:
    body = {"model": "claude-opus-5-5", "max_tokens": 100, "messages": messages, **extra}
    assert read(body).reasoning is reasons
