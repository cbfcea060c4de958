"""The scripted model the fake plays for real agents (``proxy.testing.agent_model``), and what the
fake and the harness record for those sessions (answer statuses, count_tokens)."""

from __future__ import annotations

import json
from typing import Any

from proxy.context.tokens.counter import TokenCounter
from proxy.testing import agent_model
from proxy.testing.agent_model import AgentModel, fact, fact_summarizer, file_text

READ = {"type": "function", "function": {"name": "Read", "parameters": {
    "type": "object", "properties": {"file_path": {"type": "string"}}}}}
EXEC = {"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}
SHELL = {"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}}
READ_FILE = {"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


def args(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def play(model: AgentModel, tools: list[dict[str, Any]], limit: int = 60
         ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A whole session against the model: the messages and the final answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": agent_model.TASK}]
    for _ in range(limit):
        answer = model({"messages": messages, "tools": tools})
        messages.append(answer)
        if not answer.get("tool_calls"):
            return messages, answer
        for call in answer["tool_calls"]:
            n = int(agent_model.FILE_NAME.findall(call["function"]["arguments"])[0])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": file_text(n)})
    raise AssertionError("no final answer")


def test_the_workspace_has_thirty_files_of_2_to_4k_tokens_with_one_fact_each() -> None:
    counter = TokenCounter()
    sizes = [counter.count_messages([{"role": "tool", "content": file_text(i)}], "gpt-4o")
             for i in range(1, agent_model.FILES + 1)]
    assert all(2000 <= n <= 4000 for n in sizes), sizes
    for i in range(1, agent_model.FILES + 1):
        assert agent_model.facts_in([file_text(i)]) == [fact(i)]
    assert fact(17) == "FACT-17: the statement template is STMT-0017"


def test_a_session_reads_25_files_then_lists_every_fact() -> None:
    messages, final = play(AgentModel(root="/work/space"), [READ])
    calls = [a for m in messages if m["role"] == "assistant" for a in args(m)]
    assert [c["file_path"] for c in calls] == [f"/work/space/notes_{i:02d}.txt"
                                              for i in range(1, 26)]
    assert max(len(args(m)) for m in messages if m["role"] == "assistant") == 2  # parallel calls
    assert all(fact(i) in final["content"] for i in range(1, 26))
    assert fact(26) not in final["content"]


def test_progress_survives_masking_and_compaction() -> None:
    model = AgentModel()
    call = {"id": "call_read_07", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes_07.txt"}'}}
    masked = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "",
                                                  "tool_calls": [call]},
              {"role": "tool", "tool_call_id": "call_read_07",
               "content": "[tool output cleared: 3,120 tokens from read_file; spill "
                          "0123456789abcdef]"}]
    assert args(model({"messages": masked, "tools": [READ_FILE]})) == [{"path": "notes_08.txt"}]
    summary = [{"role": "user", "content": "go"},
               {"role": "user", "content": fact_summarizer({"messages": [
                   {"role": "tool", "content": file_text(i)} for i in range(1, 13)]})}]
    assert args(model({"messages": summary, "tools": [READ_FILE]})) == [{"path": "notes_13.txt"}]
    final = model({"messages": [*masked, {"role": "user", "content": fact(25)}],
                   "tools": [READ_FILE]})["content"]
    assert "spill 0123456789abcdef" in final and agent_model.named_spills(final) == [
        "0123456789abcdef"]


def test_each_agent_s_tool_gets_its_own_arguments() -> None:
    chat = {"messages": [{"role": "user", "content": "go"}]}
    assert args(AgentModel("/w")({**chat, "tools": [EXEC]})) == [{"cmd": "cat /w/notes_01.txt"}]
    assert args(AgentModel("/w")({**chat, "tools": [SHELL]})) == [
        {"command": ["bash", "-lc", "cat /w/notes_01.txt"]}]
    assert args(AgentModel("/w")({**chat, "tools": [EXEC, READ_FILE]})) == [
        {"path": "/w/notes_01.txt"}]


def test_side_requests_and_an_agent_s_own_compaction_get_plain_text() -> None:
    title = AgentModel()({"messages": [{"role": "user", "content": "a title please"}],
                          "tools": None})
    assert title["content"] and "tool_calls" not in title
    compaction = AgentModel()({"messages": [
        {"role": "tool", "content": file_text(3)},
        {"role": "user", "content": "You are performing a CONTEXT CHECKPOINT COMPACTION."}],
        "tools": [EXEC]})
    assert fact(3) in compaction["content"] and "tool_calls" not in compaction
