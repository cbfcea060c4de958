"""The provider's own server-side edits of a Messages request (``proxy.testing.fake.
server_edits``): a compaction block starts what the model reads, ``clear_tool_uses`` clears old
tool results over its trigger and reports it, and neither invalidates a bound thinking block."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from factories import TOOL

from proxy.testing.fake.fake_apis import MESSAGES
from proxy.testing.fake.server_edits import (
    CLEAR_TOOL_USES,
    CLEARED,
    CONTEXT_MANAGEMENT,
    after_compaction,
    clear_tool_uses,
    model_view,
    tool_uses,
)
from proxy.testing.fake_upstream import FakeUpstream

Client = TestClient[web.Request, web.Application]
Poster = Callable[..., Awaitable[tuple[int, dict[str, Any]]]]


def loop(n: int, names: tuple[str, ...] = ("read_file",)) -> list[dict[str, Any]]:
    """A task and ``n`` tool uses, each answered (tool ``names`` in turn)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read the files"}]
    for i in range(n):
        messages += [{"role": "assistant", "content": [{
            "type": "tool_use", "id": f"toolu_{i}", "name": names[i % len(names)],
            "input": {"path": f"{i}.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                          "content": f"contents of file {i} " * 20}]}]
    return messages


def words(body: dict[str, Any]) -> int:
    return len(json.dumps(body).split())


def clearing(value: int = 10, **extra: Any) -> dict[str, Any]:
    return {"edits": [{"type": CLEAR_TOOL_USES,
                       "trigger": {"type": "input_tokens", "value": value}, **extra}]}


@pytest.fixture
async def served(aiohttp_client: Callable[[web.Application], Awaitable[Client]]
                 ) -> tuple[FakeUpstream, list[dict[str, Any]], Poster]:
    seen: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        if body["messages"][-1]["role"] == "tool":
            return {"role": "assistant", "content": "done"}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_9", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]}

    fake = FakeUpstream(responder=responder)
    client = await aiohttp_client(fake.app())

    async def post(messages: list[Any], beta: str = CONTEXT_MANAGEMENT, **extra: Any
                   ) -> tuple[int, dict[str, Any]]:
        body = {"model": "claude-x", "max_tokens": 2048, "tools": [TOOL],
                "messages": messages, **extra}
        resp = await client.post(MESSAGES, json=body,
                                 headers={"x-api-key": "k", "anthropic-beta": beta})
        if extra.get("stream"):
            return resp.status, {"events": [json.loads(line[5:]) for line in (
                await resp.text()).splitlines() if line.startswith("data:")]}
        return resp.status, await resp.json()

    return fake, seen, post


def test_a_compaction_block_starts_what_the_model_reads() -> None:
    body = {"system": "s", "messages": [
        {"role": "user", "content": "old task"}, {"role": "assistant", "content": "old"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "Summary."},
                                          {"type": "text", "text": "Going on."}]},
        {"role": "user", "content": "next"}]}
    assert after_compaction(body)["messages"] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Summary."},
                                          {"type": "text", "text": "Going on."}]},
        {"role": "user", "content": "next"}]
    assert after_compaction({"messages": loop(1)}) == {"messages": loop(1)}


def test_old_tool_results_are_cleared_over_the_trigger_only() -> None:
    body = {"messages": loop(5, ("read_file", "grep"))}
    assert clear_tool_uses(body, clearing(10**6)["edits"][0], words) == (body, None)
    edit = clearing(keep={"type": "tool_uses", "value": 2}, exclude_tools=["grep"],
                    clear_tool_inputs=True)["edits"][0]
    after, report = clear_tool_uses(body, edit, words)
    results = [m["content"][0]["content"] for m in after["messages"][2::2]]
    assert [r == CLEARED for r in results] == [True, False, True, False, False]
    inputs = [m["content"][0]["input"] for m in after["messages"][1::2]]
    assert inputs[0] == {} and inputs[1] == {"path": "1.txt"} and inputs[3]
    assert report is not None and report["type"] == CLEAR_TOOL_USES
    assert report["cleared_tool_uses"] == 2 and report["cleared_input_tokens"] > 0
    assert body["messages"][2]["content"][0]["content"] != CLEARED  # the request unchanged
    assert tool_uses(body)[:2] == [("toolu_0", "read_file"), ("toolu_1", "grep")]
    _, report = clear_tool_uses(body, {"type": CLEAR_TOOL_USES,
                                       "trigger": {"value": 1}}, words)
    assert report is not None and report["cleared_tool_uses"] == 2  # keep: 3 by default


def test_edits_need_their_beta_and_clear_thinking_keeping_all_is_a_no_op() -> None:
    body = {"messages": loop(5), "context_management": clearing()}
    assert model_view(body, frozenset(), words) == (body, None)
    thinking = dict(body, context_management={"edits": [
        {"type": "clear_thinking_20251015", "keep": "all"}]})
    assert model_view(thinking, frozenset({CONTEXT_MANAGEMENT}), words) == (
        thinking, {"applied_edits": []})


async def test_the_model_reads_the_cleared_history_and_the_answer_reports_it(
        served: Any) -> None:
    fake, seen, post = served
    status, doc = await post(loop(5), context_management=clearing())
    assert status == 200
    tools = [m["content"] for m in seen[-1]["messages"] if m["role"] == "tool"]
    assert tools[:2] == [CLEARED, CLEARED] and CLEARED not in tools[2:]
    edit = doc["context_management"]["applied_edits"][0]
    assert edit["cleared_tool_uses"] == 2 and edit["cleared_input_tokens"] > 0
    assert doc["usage"]["input_tokens"] < fake.measure(
        {"messages": seen[-1]["messages"], "tools": None})[0] + 200
    status, doc = await post(loop(5), context_management=clearing(10**6))
    assert doc["context_management"] == {"applied_edits": []}
    assert CLEARED not in [m["content"] for m in seen[-1]["messages"] if m["role"] == "tool"]
    status, doc = await post(loop(5), context_management=clearing(), stream=True)
    delta = next(e for e in doc["events"] if e["type"] == "message_delta")
    assert delta["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 2
    assert "context_management" not in doc["events"][0]["message"]


async def test_server_side_edits_never_invalidate_thinking(served: Any) -> None:
    _, seen, post = served
    kw: dict[str, Any] = {"model": "claude-opus-5-5", "thinking": {"type": "adaptive"},
                          "context_management": clearing()}
    history = [*loop(4), {"role": "assistant", "content": "Read them all."},
               {"role": "user", "content": "and now?"}]
    status, first = await post(history, **kw)
    assert status == 200 and first["content"][0]["type"] == "thinking"
    assert first["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 1
    answer = {"role": "assistant", "content": first["content"]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_9",
                                           "content": "ok"}]}
    status, doc = await post([*history, answer, result], **kw)  # the client's history, uncut
    assert status == 200 and "input_transformations" not in doc, doc
    compacted = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [
        {"type": "compaction", "content": "Read four files."}]},
        {"role": "user", "content": "next"}]
    status, doc = await post(compacted, **kw)
    assert status == 200
    assert seen[-1]["messages"][0] == {"role": "assistant", "content": "Read four files."}
