"""End-to-end relay through the real openai SDK: what the upstream got, what the client got."""

from __future__ import annotations

import json
import urllib.request

import openai

from proxy.testing.harness import Harness

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."}]


def test_sync_client_gets_the_upstream_answer(client: openai.OpenAI, harness: Harness) -> None:
    resp = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert resp.choices[0].message.content == "ack: Say hello."
    assert resp.usage is not None and resp.usage.prompt_tokens > 0
    sent = harness.fake.chat_requests()[-1]
    assert sent["messages"] == MESSAGES and sent["model"] == "gpt-4o"


async def test_async_client(aclient: openai.AsyncOpenAI, harness: Harness) -> None:
    resp = await aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert resp.choices[0].message.content == "ack: Say hello."
    assert harness.fake.chat_requests()[-1]["messages"] == MESSAGES


def test_streaming_sync(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "ack: Say hello."
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


async def test_streaming_async(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES,
                                                   stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "ack: Say hello."


TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def test_tool_call_round_trip(make_harness, sdk) -> None:
    from proxy.testing.fake_upstream import FakeUpstream

    def responder(body):
        if body["messages"][-1]["role"] == "tool":
            return {"role": "assistant", "content": "The file says: " +
                    body["messages"][-1]["content"]}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": "a.txt"})}}]}

    h = make_harness(fake=FakeUpstream(responder=responder))
    c = sdk(h, h.create_key())
    msgs: list = [{"role": "user", "content": "read a.txt"}]
    first = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "read_file"
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "hello from a.txt"}]
    second = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS)
    assert second.choices[0].message.content == "The file says: hello from a.txt"
    got = h.fake.chat_requests()[-1]
    assert got["tools"] == TOOLS
    assert got["messages"][1]["tool_calls"][0]["id"] == call.id
    assert got["messages"][2] == {"role": "tool", "tool_call_id": call.id,
                                  "content": "hello from a.txt"}


def test_unmanaged_fields_pass_through_untouched(client: openai.OpenAI,
                                                 harness: Harness) -> None:
    extra = {"n": 3, "response_format": {"type": "json_object"}, "tools": TOOLS,
             "logprobs": True, "top_logprobs": 2, "temperature": 0.25, "seed": 7,
             "metadata": {"a": "b"}}
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MESSAGES,
        n=3, response_format={"type": "json_object"}, tools=TOOLS,
        logprobs=True, top_logprobs=2, temperature=0.25, seed=7, metadata={"a": "b"},
        extra_body={"my_vendor_field": {"nested": [1, 2.5, None, "ü"]}})
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/json")
    sent = harness.fake.chat_requests()[-1]
    for k, v in extra.items():
        assert sent[k] == v, k
    assert sent["my_vendor_field"] == {"nested": [1, 2.5, None, "ü"]}


def test_relay_is_byte_faithful(harness: Harness, key: str) -> None:
    # Odd spacing, key order and escapes must reach the upstream exactly as sent.
    raw = (b'{ "zeta":1,"model" : "gpt-4o", "messages":[{"role":"user","content":"caf\\u00e9"}],'
           b' "unknown_field": {"x": [1e3, true]} }')
    req = urllib.request.Request(harness.base_url + "/chat/completions", data=raw, method="POST",
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200
    assert harness.fake.requests[-1].body == raw


def test_upstream_receives_the_upstream_key_not_the_clients(client: openai.OpenAI, key: str,
                                                           harness: Harness) -> None:
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    headers = harness.fake.requests[-1].headers
    assert headers["Authorization"] == f"Bearer {harness.upstream_key}"
    assert key not in json.dumps(headers)
