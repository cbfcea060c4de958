"""The fake upstream's streamed events (``proxy.testing.fake.fake_events``): a whole Messages or
Responses answer cut into the events the provider sends, which put back together give the
answer again."""

from __future__ import annotations

import json
from typing import Any

from proxy.testing.fake.fake_events import anthropic_events, responses_events, responses_object


def events(raw: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in raw:
        head, data = chunk.decode().strip().split("\n")
        out.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


WHOLE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
         "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 20},
         "content": [{"type": "thinking", "thinking": "let me see", "signature": "sig"},
                     {"type": "text", "text": "Reading the file now."},
                     {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"p": "a"}}]}


def test_a_messages_answer_comes_back_from_its_events() -> None:
    got = events(anthropic_events(WHOLE, 3))
    names = [name for name, _ in got]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == 3 == names.count("content_block_stop")
    deltas = [d["delta"] for n, d in got if n == "content_block_delta"]
    assert "".join(d.get("text", "") for d in deltas) == "Reading the file now."
    assert "".join(d.get("thinking", "") for d in deltas) == "let me see"
    assert json.loads("".join(d.get("partial_json", "") for d in deltas)) == {"p": "a"}
    assert {"type": "signature_delta", "signature": "sig"} in deltas
    assert len([d for d in deltas if d["type"] == "text_delta"]) == 3
    assert got[0][1]["message"]["usage"]["output_tokens"] == 1
    assert got[-2][1]["usage"] == {"output_tokens": 20}


def test_a_responses_answer_comes_back_from_its_events() -> None:
    output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Hello there", "annotations": []}]},
              {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f",
               "arguments": '{"x": 1}', "status": "completed"}]
    got = events(responses_events("gpt-x", output, {"input_tokens": 5}, 2))
    assert [d["sequence_number"] for _, d in got] == list(range(len(got)))
    assert got[0][0] == "response.created" and got[0][1]["response"]["status"] == "in_progress"
    done = got[-1][1]["response"]
    assert got[-1][0] == "response.completed" and done["output"] == output
    assert done["usage"] == {"input_tokens": 5}
    text = "".join(d["delta"] for n, d in got if n == "response.output_text.delta")
    args = "".join(d["delta"] for n, d in got if n == "response.function_call_arguments.delta")
    assert (text, args) == ("Hello there", '{"x": 1}')
    added = [d["item"] for n, d in got if n == "response.output_item.added"]
    assert added[0]["content"] == [] and added[1]["arguments"] == ""


def test_a_responses_object_is_an_openai_response() -> None:
    obj = responses_object("m", [], None, "in_progress")
    assert (obj["object"], obj["status"], obj["model"], obj["output"]) == (
        "response", "in_progress", "m", [])
