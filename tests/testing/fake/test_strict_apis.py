"""The strict fake refuses on ``/v1/messages`` and ``/v1/responses`` what the real APIs refuse,
in their shape and words, before its responder is called, and records each refusal; it accepts
what they accept (betas, signed thinking, reasoning items kept with their items); its prompt
cache is keyed as each provider keys its own."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from factories import FUNCTION, LONG, TOOL

from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES, as_chat, sign_thinking
from proxy.testing.fake.strict_apis import check_messages
from proxy.testing.fake_upstream import FakeUpstream

Client = TestClient[web.Request, web.Application]
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}
MID_SYSTEM = "mid-conversation-tool-changes-2026-07-01"
TOOL_SEARCH = "advanced-tool-use-2025-11-20"


class Model:
    """A responder that asks for one tool call until a tool result is in, and counts calls."""

    def __init__(self, tool: str = "read_file") -> None:
        self.seen: list[dict[str, Any]] = []
        self.tool = tool

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(body)
        if body["messages"][-1]["role"] == "tool":
            return {"role": "assistant", "content": "The file says hello."}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{len(self.seen)}", "type": "function",
            "function": {"name": self.tool, "arguments": '{"path": "a.txt"}'}}]}


class Fake:
    def __init__(self, fake: FakeUpstream, client: Client, model: Model) -> None:
        self.fake, self.client, self.model = fake, client, model

    async def post(self, path: str, body: dict[str, Any], beta: str | None = None,
                   ) -> tuple[int, dict[str, Any]]:
        headers = {"x-api-key": "sk-test"} | ({"anthropic-beta": beta} if beta else {})
        resp = await self.client.post(path, json=body, headers=headers)
        return resp.status, await resp.json()

    async def messages(self, messages: list[Any], beta: str | None = None, **extra: Any
                       ) -> tuple[int, dict[str, Any]]:
        return await self.post(MESSAGES, {"model": "claude-x", "max_tokens": 2048, "tools": [TOOL],
                                          "messages": messages, **extra}, beta)

    async def responses(self, items: list[Any], **extra: Any) -> tuple[int, dict[str, Any]]:
        return await self.post(RESPONSES, {"model": "gpt-x", "input": items,
                                           "tools": [FUNCTION], **extra})


@pytest.fixture
async def served(aiohttp_client: Callable[[web.Application], Awaitable[Client]]
                 ) -> Callable[..., Awaitable[Fake]]:
    async def go(**kwargs: Any) -> Fake:
        model = Model(kwargs.pop("tool", "read_file"))
        fake = FakeUpstream(responder=model, **kwargs)
        return Fake(fake, await aiohttp_client(fake.app()), model)

    return go


def anthropic_refusal(status: int, doc: dict[str, Any]) -> str:
    """The message of a refusal in Anthropic's shape."""
    assert status == 400 and doc["type"] == "error", doc
    assert doc["error"]["type"] == "invalid_request_error"
    return str(doc["error"]["message"])


def openai_refusal(status: int, doc: dict[str, Any]) -> tuple[str, str | None]:
    """(message, param) of a refusal in OpenAI's shape."""
    assert status == 400, doc
    assert doc["error"]["type"] == "invalid_request_error" and doc["error"]["code"] is None
    return str(doc["error"]["message"]), doc["error"]["param"]


# --- Messages: roles and tool pairs --------------------------------------------------------


async def test_a_role_other_than_user_or_assistant_is_refused_unanswered(served: Any) -> None:
    f = await served()
    status, doc = await f.messages([{"role": "user", "content": "hi"},
                                    {"role": "robot", "content": "beep"}])
    assert anthropic_refusal(status, doc) == \
        "messages.1.role: Input should be 'user' or 'assistant'"
    assert f.model.seen == []  # refused before the responder
    assert f.fake.refusals() == [(MESSAGES, "messages.1.role: Input should be 'user' or "
                                            "'assistant'")]
    assert f.fake.requests[-1].refused == f.fake.refusals()[0][1]


async def test_a_system_message_inside_messages_needs_the_mid_conversation_beta(
        served: Any) -> None:
    f = await served()
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
               {"role": "system", "content": "Tools changed."},
               {"role": "user", "content": "go on"}]
    status, doc = await f.messages(history)
    assert anthropic_refusal(status, doc) == \
        "messages.2.role: Input should be 'user' or 'assistant'"
    status, doc = await f.messages(history, beta=f"claude-code-20250219, {MID_SYSTEM}")
    assert status == 200 and len(f.model.seen) == 1
    assert f.model.seen[0]["messages"][2] == {"role": "system", "content": "Tools changed."}
    developer = [*history[:2], {"role": "developer", "content": "x"}, history[3]]
    status, doc = await f.messages(developer, beta=MID_SYSTEM)
    assert "messages.2.role: Input should be" in anthropic_refusal(status, doc)
    assert len(f.fake.refusals()) == 2


async def test_the_first_message_must_be_the_users(served: Any) -> None:
    f = await served()
    status, doc = await f.messages([{"role": "assistant", "content": "hello"},
                                    {"role": "user", "content": "hi"}])
    assert anthropic_refusal(status, doc) == 'messages: first message must use the "user" role'


async def test_a_tool_result_must_answer_a_tool_use_of_the_previous_message(
        served: Any) -> None:
    f = await served()
    status, doc = await f.messages([{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "hello"},
                                    {"role": "user", "content": [RESULT]}])
    assert anthropic_refusal(status, doc) == (
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message.")
    two_back = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": [TOOL_USE]},
                {"role": "user", "content": [RESULT]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "and"}, RESULT]}]
    status, doc = await f.messages(two_back)
    assert anthropic_refusal(status, doc).startswith(
        "messages.4.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1.")
    status, doc = await f.messages(two_back[:4])
    assert status == 200


async def test_every_tool_use_must_be_answered_in_the_next_message(served: Any) -> None:
    f = await served()
    second = dict(TOOL_USE, id="toolu_2")
    status, doc = await f.messages([{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": [TOOL_USE, second]},
                                    {"role": "user", "content": [RESULT, {"type": "text",
                                                                          "text": "hm"}]}])
    assert anthropic_refusal(status, doc) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_2. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message.")
    status, doc = await f.messages([{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": [TOOL_USE]},
                                    {"role": "user", "content": "never mind"}])
    assert "messages.1: `tool_use` ids were found without" in anthropic_refusal(status, doc)
    assert f.model.seen == []


# --- Messages: thinking --------------------------------------------------------------------


THINK = {"type": "enabled", "budget_tokens": 1024}


async def test_thinking_blocks_are_issued_signed_and_only_the_fakes_are_accepted(
        served: Any) -> None:
    f = await served()
    task = {"role": "user", "content": "read a.txt"}
    status, first = await f.messages([task], thinking=THINK)
    assert status == 200
    block = first["content"][0]
    assert block["type"] == "thinking" and block["signature"] == sign_thinking(block["thinking"])
    assert first["content"][1]["type"] == "tool_use"
    history = [task, {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": [{"type": "tool_result", "content": "hello",
                                             "tool_use_id": first["content"][1]["id"]}]}]
    status, second = await f.messages(history, thinking=THINK)
    assert status == 200 and second["content"][0]["type"] == "thinking"
    assert f.fake.refusals() == []
    forged = json.loads(json.dumps(history))
    forged[1]["content"][0]["signature"] = "s1=="
    status, doc = await f.messages(forged, thinking={"type": "adaptive"})
    assert anthropic_refusal(status, doc) == \
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    status, doc = await f.messages(forged)  # thinking off: still not a block it issued
    assert "Invalid `signature`" in anthropic_refusal(status, doc)
    helper = FakeUpstream.thinking_block("my own words")
    assert helper["signature"] == sign_thinking("my own words") != sign_thinking("my own word")


async def test_a_tool_loop_under_thinking_must_keep_its_thinking_block(served: Any) -> None:
    f = await served()
    history = [{"role": "user", "content": "read a.txt"},
               {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                                 TOOL_USE]},
               {"role": "user", "content": [RESULT]}]
    status, doc = await f.messages(history, thinking=THINK)
    message = anthropic_refusal(status, doc)
    assert message.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`text`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block")
    status, _ = await f.messages(history)  # thinking off: fine
    assert status == 200
    history[1]["content"] = [FakeUpstream.thinking_block("Plan."), *history[1]["content"]]
    status, _ = await f.messages(history, thinking=THINK)
    assert status == 200
    status, _ = await f.messages(  # no tool loop going on: a plain new prompt
        [*history, {"role": "assistant", "content": "Done."},
         {"role": "user", "content": "thanks"}], thinking=THINK)
    assert status == 200


async def test_thinking_settings_the_real_api_refuses(served: Any) -> None:
    f = await served()
    hi = [{"role": "user", "content": "hi"}]
    status, doc = await f.messages(hi, thinking=THINK, max_tokens=1024)
    assert anthropic_refusal(status, doc).startswith(
        "`max_tokens` must be greater than `thinking.budget_tokens`.")
    status, doc = await f.messages(hi, thinking=THINK, tool_choice={"type": "any"})
    assert anthropic_refusal(status, doc) == \
        "Thinking may not be enabled when tool_choice forces tool use."
    status, doc = await f.messages(hi, thinking={"type": "adaptive"}, temperature=0)
    assert anthropic_refusal(status, doc).startswith(
        "`temperature` may only be set to 1 when thinking is enabled.")
    status, _ = await f.messages(hi, temperature=0, tool_choice={"type": "any"})
    assert status == 200  # without thinking: fine
    status, _ = await f.messages(hi, thinking={"type": "adaptive"},
                                 tool_choice={"type": "none"})
    assert status == 200


async def test_empty_messages_and_text_blocks_are_refused(served: Any) -> None:
    f = await served()
    status, doc = await f.messages([{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": []},
                                    {"role": "user", "content": "go"}])
    assert anthropic_refusal(status, doc) == ("messages.1: all messages must have non-empty "
                                              "content except for the optional final assistant "
                                              "message")
    status, doc = await f.messages([{"role": "user", "content": [{"type": "text", "text": ""}]}])
    assert anthropic_refusal(status, doc) == "messages: text content blocks must be non-empty"
    status, doc = await f.messages([{"role": "user", "content": [{"type": "text",
                                                                   "text": " \n"}]}])
    assert anthropic_refusal(status, doc) == \
        "messages: text content blocks must contain non-whitespace text"
    status, doc = await f.messages([{"role": "user", "content": "hi"}, "oops"])
    assert anthropic_refusal(status, doc) == "messages.1: Input should be a valid dictionary"
    status, _ = await f.messages([{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": ""}])  # a prefill
    assert status == 200


async def test_preserved_thinking_binds_a_block_to_its_prefix(served: Any) -> None:
    f = await served()
    task = {"role": "user", "content": "read a.txt"}
    kw: dict[str, Any] = {"model": "claude-fable-5-1", "thinking": {"type": "adaptive"},
                          "system": "Be brief."}
    _, first = await f.messages([task], **kw)
    result = {"type": "tool_result", "tool_use_id": first["content"][1]["id"],
              "content": "hello"}
    history = [task, {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": [result]}]
    status, _ = await f.messages(history, **kw)
    assert status == 200  # unchanged prefix
    status, doc = await f.messages(history, **dict(kw, system="Be brief. Today is Monday."))
    message = anthropic_refusal(status, doc)
    assert message == (
        "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a "
        "different conversation. Remove the block, or set "
        "`thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\". That setting "
        "requires the `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` "
        "header. The `system` prompt differs from the one this block was created with.")
    edited = [{"role": "user", "content": "read a.txt, please"}, *history[1:]]  # a rewrite
    status, doc = await f.messages(edited, **kw)
    assert anthropic_refusal(status, doc).endswith("in the `anthropic-beta` header.")
    drop = dict(kw, thinking={"type": "adaptive",
                              "block_binding": {"prefix_mismatch_behavior": "drop_block"}})
    status, _ = await f.messages(edited, **drop)  # without its beta: still refused
    assert status == 400
    status, _ = await f.messages(edited, beta="thinking-binding-controls-2026-08-01", **drop)
    assert status == 200
    status, _ = await f.messages(edited, **dict(kw, model="claude-opus-4-5"))
    assert status == 200  # older models do not bind their blocks
    status, _ = await f.messages(  # a block the fake did not issue here is not bound
        [task, {"role": "assistant", "content": [FakeUpstream.thinking_block("x"),
                                                 {"type": "text", "text": "ok"}]},
         {"role": "user", "content": "go"}], **dict(kw, system="Other."))
    assert status == 200


async def test_a_streamed_thinking_block_reaches_the_sdk_signed(served: Any) -> None:
    f = await served(stream_chunks=3)
    root = str(f.client.make_url("")).rstrip("/")
    async with anthropic.AsyncAnthropic(base_url=root, api_key="k", max_retries=0) as client, \
            client.messages.stream(model="claude-x", max_tokens=2048, thinking=THINK,  # type: ignore[arg-type]
                                   tools=[TOOL],  # type: ignore[list-item]
                                   messages=[{"role": "user", "content": "go"}]) as stream:
        final = await stream.get_final_message()
    block = final.content[0]
    assert block.type == "thinking" and block.signature == sign_thinking(block.thinking)
    assert final.content[1].type == "tool_use"


# --- Messages: betas, cache_control, windows -----------------------------------------------


async def test_beta_fields_need_their_beta(served: Any) -> None:
    f = await served()
    tools = [TOOL, dict(TOOL, name="grep", defer_loading=True)]
    body = {"model": "claude-x", "max_tokens": 64, "tools": tools,
            "messages": [{"role": "user", "content": "hi"}]}
    status, doc = await f.post(MESSAGES, body)
    assert anthropic_refusal(status, doc) == \
        "tools.1.defer_loading: Extra inputs are not permitted"
    status, doc = await f.post(MESSAGES, body, beta="claude-code-20250219")
    assert "tools.1.defer_loading" in anthropic_refusal(status, doc)
    status, _ = await f.post(MESSAGES, body, beta=f"claude-code-20250219,{TOOL_SEARCH}")
    assert status == 200


async def test_at_most_four_cache_control_markers(served: Any) -> None:
    f = await served()
    mark = {"cache_control": {"type": "ephemeral"}}

    def text(n: int) -> list[dict[str, Any]]:
        return [{"type": "text", "text": f"part {i}", **mark} for i in range(n)]

    body = {"model": "claude-x", "max_tokens": 64, "system": text(2),
            "tools": [dict(TOOL, **mark)], "messages": [{"role": "user", "content": text(2)}]}
    status, doc = await f.post(MESSAGES, body)
    assert anthropic_refusal(status, doc) == \
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    body["system"] = text(1)
    status, _ = await f.post(MESSAGES, body)
    assert status == 200


async def test_strict_implies_the_windows_of_its_models(served: Any) -> None:
    f = await served(models={"small": 50})
    body = {"model": "small", "max_tokens": 8, "messages": [{"role": "user", "content": LONG}]}
    status, doc = await f.post(MESSAGES, body)
    assert anthropic_refusal(status, doc).startswith("prompt is too long: ")
    status, doc = await f.post(RESPONSES, {"model": "small", "input": LONG})
    assert status == 400 and doc["error"]["code"] == "context_length_exceeded"
    assert [p for p, _ in f.fake.refusals()] == [MESSAGES, RESPONSES]
    loose = await served(models={"small": 50}, strict=False)
    status, _ = await loose.post(MESSAGES, body)
    assert status == 200
    status, _ = await loose.messages([{"role": "robot", "content": "x"}])
    assert status == 200 and loose.fake.refusals() == []


# --- Responses -----------------------------------------------------------------------------


async def test_an_output_needs_its_call_and_a_call_its_output(served: Any) -> None:
    f = await served()
    user = {"role": "user", "content": "hi"}
    call = {"type": "function_call", "call_id": "call_1", "name": "read_file",
            "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "hello"}
    status, doc = await f.responses([user, output, call])
    assert openai_refusal(status, doc) == (
        "No tool call found for function call output with call_id call_1.", "input")
    status, doc = await f.responses([user, call])
    assert openai_refusal(status, doc) == ("No tool output found for function call call_1.",
                                           "input")
    custom = {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch",
              "input": "*** Begin Patch"}
    status, doc = await f.responses([user, custom])
    assert openai_refusal(status, doc)[0] == "No tool output found for custom tool call call_2."
    status, doc = await f.responses([user, {"type": "custom_tool_call_output",
                                            "call_id": "call_9", "output": "x"}])
    assert openai_refusal(status, doc)[0] == \
        "No tool call found for custom tool call output with call_id call_9."
    assert f.model.seen == [] and len(f.fake.refusals()) == 4
    status, _ = await f.responses([user, call, output])
    assert status == 200
    status, _ = await f.responses([output], previous_response_id="resp_1")  # stored calls
    assert status == 200


async def test_items_the_api_knows_are_accepted_custom_calls_reach_the_responder(
        served: Any) -> None:
    f = await served(tool="apply_patch")
    items = [{"role": "user", "content": "patch it"},
             {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "e"},
             {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch",
              "input": "*** Begin Patch"},
             {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
             {"type": "web_search_call", "id": "ws_1", "status": "completed"},
             {"type": "compaction", "encrypted_content": "zzz"},
             {"role": "user", "content": "again"}]
    tools = [{"type": "custom", "name": "apply_patch", "description": "Patch files"}]
    status, doc = await f.responses(items, tools=tools)
    assert status == 200
    seen = f.model.seen[-1]["messages"]
    assert seen[1]["tool_calls"][0]["function"] == {"name": "apply_patch",
                                                    "arguments": "*** Begin Patch"}
    assert seen[2] == {"role": "tool", "tool_call_id": "call_p", "content": "Done!"}
    call = doc["output"][0]
    assert call["type"] == "custom_tool_call" and call["input"] == '{"path": "a.txt"}'
    status, doc = await f.responses([{"type": "robot"}])
    message, param = openai_refusal(status, doc)
    assert message.startswith("Invalid value: 'robot'.") and param == "input[0].type"
    status, doc = await f.responses([{"role": "robot", "content": "x"}])
    assert openai_refusal(status, doc) == (
        "Invalid value: 'robot'. Supported values are: 'assistant', 'system', 'developer', and "
        "'user'.", "input[0].role")
    status, doc = await f.responses([{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": [{"type": "input_text", "text": "earlier"}]}])
    assert openai_refusal(status, doc) == (
        "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
        "input[1].content[0]")
    status, doc = await f.responses([{"role": "user", "content": [
        {"type": "output_text", "text": "x"}]}])
    assert openai_refusal(status, doc)[1] == "input[0].content[0]"


async def test_an_issued_item_needs_its_reasoning_item(served: Any) -> None:
    f = await served()
    user = {"role": "user", "content": "read a.txt"}
    status, first = await f.responses([user], model="gpt-5-mini",
                                      include=["reasoning.encrypted_content"])
    assert status == 200
    reasoning, call = first["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["summary"] == [] and reasoning["encrypted_content"]
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "hello"}
    status, _ = await f.responses([user, reasoning, call, output], model="gpt-5-mini")
    assert status == 200
    status, doc = await f.responses([user, call, output], model="gpt-5-mini")
    assert openai_refusal(status, doc) == (
        f"Item '{call['id']}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{reasoning['id']}'.", "input")
    status, doc = await f.responses([user, reasoning, {"role": "user", "content": "hm"}, call,
                                     output])  # another turn in between
    assert "without its required 'reasoning' item" in openai_refusal(status, doc)[0]
    status, doc = await f.responses([user, reasoning, output], model="gpt-5-mini")
    assert openai_refusal(status, doc) == (  # its call dropped: the output's check comes first
        f"No tool call found for function call output with call_id {call['call_id']}.", "input")
    status, doc = await f.responses([user, reasoning, {"role": "user", "content": "hm"}])
    assert openai_refusal(status, doc) == (
        f"Item '{reasoning['id']}' of type 'reasoning' was provided without its required "
        "following item.", "input")
    status, doc = await f.responses([user, reasoning])
    assert "without its required following item" in openai_refusal(status, doc)[0]
    no_id = {k: v for k, v in call.items() if k != "id"}
    status, _ = await f.responses([user, no_id, output])  # items without ids go unchecked
    assert status == 200
    status, plain = await f.responses([user])  # no reasoning asked for, not a reasoning model
    assert status == 200 and plain["output"][0]["type"] == "function_call"
    status, asked = await f.responses([user], reasoning={"effort": "low"})
    assert status == 200 and asked["output"][0]["type"] == "reasoning"
    assert "encrypted_content" not in asked["output"][0]


async def test_a_streamed_reasoning_answer_opens_with_its_item(served: Any) -> None:
    f = await served()
    resp = await f.client.post(RESPONSES, json={"model": "o4-mini", "stream": True,
                                                "input": "hi", "tools": [FUNCTION]})
    events = [json.loads(line[5:]) for line in (await resp.text()).splitlines()
              if line.startswith("data:")]
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "function_call"]
    done = events[-1]["response"]["output"]
    assert f.fake.reasoning_of == {done[1]["id"]: done[0]["id"]}


# --- the cache, keyed as each provider keys it ---------------------------------------------


async def test_messages_cache_a_new_tool_choice_reads_only_tools_and_system(
        served: Any) -> None:
    f = await served()
    history = [{"role": "user", "content": LONG}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": LONG + " again"}]
    base = {"model": "claude-x", "max_tokens": 2048, "tools": [TOOL], "system": LONG,
            "messages": history[:1]}
    await f.post(MESSAGES, base)
    grown = dict(base, messages=history)
    _, same = await f.post(MESSAGES, grown)
    _, prompt_tokens, tools_tokens = f.fake.measure(as_chat(MESSAGES, grown))
    head = (tools_tokens + prompt_tokens[0]) // 128 * 128
    whole = (tools_tokens + sum(prompt_tokens[:2])) // 128 * 128
    assert same["usage"]["cache_read_input_tokens"] == whole > head
    _, other = await f.post(MESSAGES, dict(grown, tool_choice={"type": "none"}))
    assert other["usage"]["cache_read_input_tokens"] == head
    _, thinking = await f.post(MESSAGES, dict(grown, thinking=THINK))
    assert thinking["usage"]["cache_read_input_tokens"] == head


async def test_messages_cache_writes_are_reported_with_markers(served: Any) -> None:
    f = await served()
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "claude-x", "max_tokens": 64, "tools": [TOOL], "system": system,
            "messages": [{"role": "user", "content": "hi"}]}
    _, first = await f.post(MESSAGES, body)
    prompt, per_message, tools_tokens = f.fake.measure(as_chat(MESSAGES, body))
    usage = first["usage"]
    assert usage["cache_read_input_tokens"] == 0
    assert usage["cache_creation_input_tokens"] == tools_tokens + per_message[0]
    assert usage["input_tokens"] == prompt - tools_tokens - per_message[0]
    _, second = await f.post(MESSAGES, body)
    usage = second["usage"]
    read = usage["cache_read_input_tokens"]
    assert read > 0 and usage["cache_creation_input_tokens"] == tools_tokens + per_message[0] - read
    _, unmarked = await f.post(MESSAGES, dict(body, system=LONG))
    assert unmarked["usage"]["cache_creation_input_tokens"] == 0


async def test_responses_cache_is_routed_by_prompt_cache_key(served: Any) -> None:
    f = await served()
    first = [{"role": "user", "content": LONG}]
    await f.responses(first, prompt_cache_key="thread-a")
    grown = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    _, same = await f.responses(grown, prompt_cache_key="thread-a")
    assert same["usage"]["input_tokens_details"]["cached_tokens"] >= 1024
    _, other = await f.responses(grown, prompt_cache_key="thread-b")
    assert other["usage"]["input_tokens_details"]["cached_tokens"] == 0
    _, unkeyed = await f.responses(grown)
    assert unkeyed["usage"]["input_tokens_details"]["cached_tokens"] == 0


def test_a_block_that_is_not_an_object_is_refused() -> None:
    body = {"model": "m", "max_tokens": 5,
            "messages": [{"role": "user", "content": [[["deep"]]]}]}
    problem = check_messages(body, frozenset())
    assert problem is not None and problem.message.startswith("messages.0.content.0:")
    body["messages"][0]["content"] = [{"type": {"a": 1}, "text": "x"}]  # type: ignore[index]
    assert check_messages(body, frozenset()) is not None
