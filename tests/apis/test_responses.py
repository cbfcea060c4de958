"""OpenAI's Responses API as the proxy means it (``proxy.apis.responses``): usage with its cache
details, a request naming a previous response relayed unmanaged, and summary calls that keep
the request's cache key, never store and call no tool."""

from __future__ import annotations

import json

from proxy.apis import responses
from proxy.context.adapters import openai_responses as responses_adapter
from proxy.upstream.usage import UpstreamUsage

BODY = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}],
        "prompt_cache_key": "k1", "tool_choice": "auto"}


def test_usage_with_its_cache_details() -> None:
    assert responses.usage(b'{"input_tokens": 90, "input_tokens_details": '
                           b'{"cached_tokens": 64, "cache_write_tokens": 16}, '
                           b'"output_tokens": 7, "output_tokens_details": '
                           b'{"reasoning_tokens": 3}}') == UpstreamUsage(90, 64, 16, 7)
    assert responses.usage(b'{"input_tokens": 90}') == UpstreamUsage(90)


def test_the_key_is_a_bearer_token_and_previous_responses_keep_their_history() -> None:
    out = responses.API.headers({"Authorization": "Bearer cp-client"}, "sk-oa")
    assert out["Authorization"] == "Bearer sk-oa" and out["Accept-Encoding"] == "identity"
    assert responses.keeps_history({"previous_response_id": "resp_1"})
    assert not responses.keeps_history({"previous_response_id": None, "input": "x"})


def test_summary_bodies_keep_the_cache_key_and_never_store() -> None:
    adapted = responses_adapter.read(BODY)
    riding = responses.summary_body(adapted, "m", adapted.messages, 100, True)
    assert riding["prompt_cache_key"] == "k1" and riding["tool_choice"] == "none"
    assert riding["tools"] is BODY["tools"] and riding["store"] is False
    bare = responses.summary_body(adapted, "m", adapted.messages, 4, False)
    assert bare["prompt_cache_key"] == "k1"  # where the cache lives, on every call
    assert "tools" not in bare and "tool_choice" not in bare
    assert bare["max_output_tokens"] == 16  # the API's floor


def test_summary_answers_join_output_text_and_tell_a_tool_call() -> None:
    got = responses.summary_answer(json.dumps({"output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "content": [{"type": "output_text", "text": "su"},
                                        {"type": "output_text", "text": "m"}]}],
        "usage": {"input_tokens": 5}}).encode())
    assert (got.text, got.tool_call, got.usage.prompt) == ("sum", False, 5)
    called = responses.summary_answer(json.dumps({"output": [
        {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": ""}],
        "usage": {"input_tokens": 5}}).encode())
    assert called.tool_call and called.text is None
