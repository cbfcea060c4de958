"""Reasoning bound to its history (``proxy.testing.fake.prefix_check``): on the providers' newest
models a replayed thinking block or reasoning item whose prefix changed is refused (Anthropic)
or dropped with every later one and listed in ``input_transformations``; the answer's own block
binds to the history as the model read it; an unchanged history, and other models, are left
alone."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from factories import FUNCTION, TOOL

from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES
from proxy.testing.fake.prefix_check import (
    REASONING_BOUND,
    binds_reasoning,
    drop_reasoning,
    drop_thinking,
)
from proxy.testing.fake.strict_apis import PRESERVED_THINKING, THINKING_BINDING
from proxy.testing.fake_upstream import FakeUpstream

Client = TestClient[web.Request, web.Application]
THINK = {"type": "adaptive"}
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
REFUSED = (
    "messages.3.content.0: Invalid `signature` in `thinking` block. The block is bound to a "
    "different conversation. Remove the block, or set "
    "`thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\". That setting "
    "requires the `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` header.")


def model(body: dict[str, Any]) -> dict[str, Any]:
    """One tool call per user message; a text answer once its result is in."""
    if body["messages"][-1]["role"] == "tool":
        return {"role": "assistant", "content": "The file says hello."}
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{len(body['messages'])}", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]}


class Fake:
    def __init__(self, fake: FakeUpstream, client: Client) -> None:
        self.fake, self.client = fake, client

    async def post(self, path: str, body: dict[str, Any], beta: str | None = None
                   ) -> tuple[int, dict[str, Any]]:
        headers = {"x-api-key": "k"} | ({"anthropic-beta": beta} if beta else {})
        resp = await self.client.post(path, json=body, headers=headers)
        if body.get("stream"):
            return resp.status, {"events": [json.loads(line[5:]) for line in (
                await resp.text()).splitlines() if line.startswith("data:")]}
        return resp.status, await resp.json()

    async def messages(self, messages: list[Any], model: str = "claude-opus-5-5",
                       beta: str | None = None, **extra: Any) -> tuple[int, dict[str, Any]]:
        return await self.post(MESSAGES, {"model": model, "max_tokens": 2048, "tools": [TOOL],
                                          "thinking": THINK, "messages": messages, **extra},
                               beta)

    async def responses(self, items: list[Any], model: str = "gpt-5.6", **extra: Any
                        ) -> tuple[int, dict[str, Any]]:
        return await self.post(RESPONSES, {"model": model, "input": items,
                                           "tools": [FUNCTION], **extra})

    def dropped(self) -> int:
        return int(self.fake.requests[-1].dropped)


@pytest.fixture
async def served(aiohttp_client: Callable[[web.Application], Awaitable[Client]]) -> Fake:
    fake = FakeUpstream(responder=model)
    return Fake(fake, await aiohttp_client(fake.app()))


def result(call: dict[str, Any], text: str = "hello") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                         "content": text}]}


async def messages_history(f: Fake) -> list[Any]:
    """task, A1 [thinking, tool_use], its result, A2 [thinking, text], a new user message."""
    task = {"role": "user", "content": "read a.txt"}
    _, a1 = await f.messages([task])
    history = [task, {"role": "assistant", "content": a1["content"]}, result(a1["content"][1])]
    _, a2 = await f.messages(history)
    assert a2["content"][0]["type"] == "thinking" and a2["content"][1]["type"] == "text"
    return [*history, {"role": "assistant", "content": a2["content"]},
            {"role": "user", "content": "again"}]


def test_the_model_lists() -> None:
    assert PRESERVED_THINKING == ("claude-fable-5", "claude-mythos-5", "claude-opus-5-5",
                                  "claude-sonnet-5-5", "claude-haiku-5-5")
    assert REASONING_BOUND == ("gpt-5.6", "gpt-5.7", "gpt-5.8", "gpt-5.9", "gpt-6")
    assert binds_reasoning("gpt-5.6-mini") and binds_reasoning("gpt-6")
    assert not binds_reasoning("gpt-5.5") and not binds_reasoning("gpt-5-mini")
    assert not binds_reasoning(None)


async def test_an_unchanged_history_is_accepted_with_nothing_dropped(served: Fake) -> None:
    f = served
    history = await messages_history(f)
    status, doc = await f.messages(history, beta=THINKING_BINDING, thinking=DROP)
    assert status == 200 and "input_transformations" not in doc and f.dropped() == 0
    status, doc = await f.messages(history)
    assert status == 200 and "input_transformations" not in doc


async def test_a_changed_prefix_is_refused_in_anthropics_words(served: Fake) -> None:
    f = served
    history = await messages_history(f)
    history[2] = result(history[1]["content"][1], "hello, edited")  # A2's prefix changed
    status, doc = await f.messages(history)
    assert status == 400 and doc["error"]["message"] == REFUSED
    assert f.fake.refusals()[-1] == (MESSAGES, REFUSED)
    status, _ = await f.messages(history, thinking=DROP)  # drop_block without its beta
    assert status == 400
    status, doc = await f.messages(history, model="claude-opus-4-5")  # not bound
    assert status == 200 and "input_transformations" not in doc


async def test_drop_block_drops_the_changed_block_and_every_later_one(served: Fake) -> None:
    f = served
    history = await messages_history(f)
    history[2] = result(history[1]["content"][1], "hello, edited")
    history += [{"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "opaque"}, FakeUpstream.thinking_block("x"),
        {"type": "text", "text": "ok"}]}, {"role": "user", "content": "go"}]
    status, doc = await f.messages(history, beta=THINKING_BINDING, thinking=DROP)
    assert status == 200, doc
    listed = [(t["type"], t["reason"], t["message_index"], t["content_index"])
              for t in doc["input_transformations"]]
    assert listed == [("thinking_block_dropped", "prefix_mismatch", 3, 0),
                      ("thinking_block_dropped", "prefix_mismatch", 5, 0),
                      ("thinking_block_dropped", "prefix_mismatch", 5, 1)]
    assert f.dropped() == 3
    # The answer's block is bound to the history the model read: without the dropped blocks.
    seen = [dict(m, content=[b for b in m["content"] if "thinking" not in b["type"]])
            if n in (3, 5) else m for n, m in enumerate(history)]
    follow = [*seen, {"role": "assistant", "content": doc["content"]},
              result(doc["content"][1])]
    status, again = await f.messages(follow, beta=THINKING_BINDING, thinking=DROP)
    assert status == 200 and "input_transformations" not in again and f.dropped() == 0
    status, _ = await f.messages(follow)  # nor refused without drop_block
    assert status == 200


async def test_a_streamed_answer_lists_its_drops_in_message_start(served: Fake) -> None:
    f = served
    history = await messages_history(f)
    history[0] = {"role": "user", "content": "read a.txt, please"}
    status, doc = await f.messages(history, beta=THINKING_BINDING, thinking=DROP, stream=True)
    start = doc["events"][0]
    assert status == 200 and start["type"] == "message_start"
    assert [(t["message_index"], t["content_index"])
            for t in start["message"]["input_transformations"]] == [(1, 0), (3, 0)]


def test_drop_thinking_leaves_other_models_and_requests_alone() -> None:
    body = {"model": "claude-sonnet-4-5", "thinking": DROP, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [FakeUpstream.thinking_block("t")]}]}
    bound = {body["messages"][1]["content"][0]["signature"]: {("a", "b", "c")}}
    assert drop_thinking(body, frozenset({THINKING_BINDING}), bound) == (body, [])
    opus = dict(body, model="claude-opus-5-5")
    assert drop_thinking(opus, frozenset(), bound) == (opus, [])  # no beta
    kept, listed = drop_thinking(opus, frozenset({THINKING_BINDING}), bound)
    assert kept["messages"][1]["content"] == [] and len(listed) == 1


# --- OpenAI Responses ---------------------------------------------------------------------


async def responses_history(f: Fake) -> list[Any]:
    """user, rs1, fc1, its output, rs2, msg2, a new user message."""
    user = {"role": "user", "content": "read a.txt"}
    _, first = await f.responses([user])
    rs1, fc1 = first["output"]
    items = [user, rs1, fc1, {"type": "function_call_output", "call_id": fc1["call_id"],
                              "output": "hello"}]
    _, second = await f.responses(items)
    assert [i["type"] for i in second["output"]] == ["reasoning", "message"]
    return [*items, *second["output"], {"role": "user", "content": "again"}]


async def test_responses_an_unchanged_history_is_accepted_with_nothing_dropped(
        served: Fake) -> None:
    f = served
    items = await responses_history(f)
    status, doc = await f.responses(items)
    assert status == 200 and "input_transformations" not in doc and f.dropped() == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_a_changed_prefix_drops_reasoning_from_there_on(
        served: Fake, stream: bool) -> None:
    f = served
    items = await responses_history(f)
    items[3] = dict(items[3], output="hello, edited")  # rs2's prefix changed, not rs1's
    items += [{"type": "reasoning", "id": "rs_other", "summary": []},
              {"role": "assistant", "content": "noted"}, {"role": "user", "content": "go"}]
    rs2 = items[4]["id"]
    status, doc = await f.responses(items, stream=stream)
    assert status == 200
    want = [{"type": "reasoning_dropped", "reason": "prefix_mismatch", "item_id": rs2,
             "index": 4},
            {"type": "reasoning_dropped", "reason": "prefix_mismatch", "item_id": "rs_other",
             "index": 7}]
    if stream:
        created, completed = doc["events"][0], doc["events"][-1]
        assert created["type"] == "response.created"
        assert created["response"]["input_transformations"] == want
        assert completed["response"]["input_transformations"] == want
        output = completed["response"]["output"]
    else:
        assert doc["input_transformations"] == want
        output = doc["output"]
    assert f.dropped() == 2
    # Replayed without what was dropped (msg2 then lacks its reasoning item: the fake dropped
    # it, so it is no longer required) and with the answer: bound to that history.
    seen = [i for n, i in enumerate(items) if n not in (4, 7)]
    follow = [*seen, *output, {"type": "function_call_output", "call_id": output[1]["call_id"],
                               "output": "hello"}]
    status, again = await f.responses(follow)
    assert status == 200, again
    assert "input_transformations" not in again and f.dropped() == 0


async def test_responses_other_models_do_not_bind(served: Fake) -> None:
    f = served
    items = await responses_history(f)
    items[0] = {"role": "user", "content": "read b.txt"}
    status, doc = await f.responses(items, model="gpt-5.5")
    assert status == 200 and "input_transformations" not in doc and f.dropped() == 0
    status, doc = await f.responses(items)
    assert status == 200 and len(doc["input_transformations"]) == 2  # the same, bound


def test_drop_reasoning_is_pure() -> None:
    body = {"model": "gpt-6", "input": [{"role": "user", "content": "hi"},
                                        {"type": "reasoning", "id": "rs_1"}]}
    kept, listed = drop_reasoning(body, {"rs_1": "not its prefix"})
    assert kept["input"] == body["input"][:1] and listed[0]["item_id"] == "rs_1"
    assert body["input"][1]["id"] == "rs_1"  # the request itself unchanged
    assert drop_reasoning(body, {}) == (body, [])
