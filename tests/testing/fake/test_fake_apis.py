"""The fake upstream's Anthropic Messages and OpenAI Responses endpoints answer the real SDKs the
way the providers do: whole and streamed, tool loops, cached-token usage, context-length
refusals and bad input in each API's own shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from factories import FUNCTION, LONG, TOOL

from proxy.testing.fake.fake_apis import as_chat
from proxy.testing.fake_upstream import FakeUpstream

Client = TestClient[web.Request, web.Application]


def calls_once(body: dict[str, Any]) -> dict[str, Any]:
    """Ask for one tool call, then answer in text once the tool result is in."""
    if body["messages"][-1]["role"] == "tool":
        return {"role": "assistant", "content": "The file says hello."}
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]}


@pytest.fixture
async def served(aiohttp_client: Callable[[web.Application], Awaitable[Client]]
                 ) -> Callable[..., Awaitable[tuple[FakeUpstream, str]]]:
    async def go(**kwargs: Any) -> tuple[FakeUpstream, str]:
        fake = FakeUpstream(**kwargs)
        client = await aiohttp_client(fake.app())
        return fake, str(client.make_url("")).rstrip("/")

    return go


async def test_messages_tool_loop_with_cached_usage(served: Any) -> None:
    fake, root = await served(responder=calls_once)
    async with anthropic.AsyncAnthropic(base_url=root, api_key="sk-ant-test",
                                        max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": LONG}]
        first = await client.messages.create(model="claude-x", max_tokens=100, system="Be brief.",
                                             tools=[TOOL], messages=messages)  # type: ignore[list-item]
        assert first.stop_reason == "tool_use"
        use = first.content[0]
        assert use.type == "tool_use" and use.input == {"path": "a.txt"}
        assert first.usage.cache_read_input_tokens == 0
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": "hello"}]}]
        second = await client.messages.create(model="claude-x", max_tokens=100,
                                              system="Be brief.", tools=[TOOL],
                                              messages=messages)  # type: ignore[list-item]
    assert second.stop_reason == "end_turn" and second.content[0].text == "The file says hello."
    cached = second.usage.cache_read_input_tokens or 0
    assert cached >= 1024 and cached % 128 == 0  # the first turn's prefix, as a provider bills it
    billed = fake.measure(as_chat("/v1/messages", fake.requests[-1].json))[0]
    assert second.usage.input_tokens + cached == billed  # input_tokens leaves the cached out
    sent = {k.lower(): v for k, v in fake.requests[-1].headers.items()}
    assert "sk-ant-test" in (sent.get("x-api-key") or sent["authorization"])  # SDKs differ


async def test_messages_stream(served: Any) -> None:
    _, root = await served(stream_chunks=3)
    async with anthropic.AsyncAnthropic(base_url=root, api_key="k", max_retries=0) as client, \
            client.messages.stream(model="claude-x", max_tokens=50, messages=[
                {"role": "user", "content": "hello there"}]) as stream:
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert len(texts) == 3 and "".join(texts) == "ack: hello there"
    assert final.content[0].text == "ack: hello there" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 8


async def test_responses_function_loop_and_stream(served: Any) -> None:
    fake, root = await served(responder=calls_once, stream_chunks=2)
    async with openai.AsyncOpenAI(base_url=root + "/v1", api_key="sk-x", max_retries=0) as client:
        first = await client.responses.create(model="gpt-x", instructions="Be brief.",
                                              input=LONG, tools=[FUNCTION])  # type: ignore[list-item]
        call = first.output[0]
        assert call.type == "function_call" and call.arguments == '{"path": "a.txt"}'
        items: list[Any] = [{"role": "user", "content": LONG}, call.model_dump(),
                            {"type": "function_call_output", "call_id": call.call_id,
                             "output": "hello"}]
        stream = await client.responses.create(model="gpt-x", instructions="Be brief.",
                                               input=items, tools=[FUNCTION],  # type: ignore[list-item]
                                               stream=True)
        events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 2
    done = events[-1].response  # type: ignore[union-attr]
    assert done.output_text == "The file says hello."
    assert done.usage is not None and done.usage.input_tokens_details.cached_tokens >= 1024
    assert len(fake.requests) == 2


async def test_context_length_and_bad_input_in_each_apis_shape(served: Any) -> None:
    _, root = await served(models={"small": 50}, enforce_windows=True)
    async with anthropic.AsyncAnthropic(base_url=root, api_key="k", max_retries=0) as ac, \
            openai.AsyncOpenAI(base_url=root + "/v1", api_key="k", max_retries=0) as oc:
        with pytest.raises(anthropic.BadRequestError) as a_err:
            await ac.messages.create(model="small", max_tokens=10,
                                     messages=[{"role": "user", "content": LONG}])
        assert "prompt is too long" in str(a_err.value)
        assert a_err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as o_err:
            await oc.responses.create(model="small", input=LONG)
        assert o_err.value.code == "context_length_exceeded"
        with pytest.raises(anthropic.BadRequestError):
            await ac.post("/v1/messages", cast_to=object, body={"model": "small"})
        with pytest.raises(openai.BadRequestError):
            await oc.post("/responses", cast_to=object, body={"model": "small"})
