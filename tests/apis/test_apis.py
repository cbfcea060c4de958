"""Each API module says what its API means; the registry and the routes take everything from
it, so a new API is one new module."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from aiohttp import web

from proxy.apis import ADAPTED, APIS, chat, messages, responses
from proxy.context.adapters import anthropic as anthropic_adapter
from proxy.context.adapters import responses as responses_adapter
from proxy.errors import ApiError
from proxy.http.apis import add_routes
from proxy.upstream.usage import UpstreamUsage


def test_the_registry_names_each_api_once() -> None:
    assert list(APIS) == ["chat", "messages", "responses"]
    assert [a.name for a in ADAPTED] == ["messages", "responses"]
    assert {a.route for a in APIS.values()} == {"/v1/chat/completions", "/v1/messages",
                                                "/v1/responses"}


def test_usage_as_each_api_reports_it() -> None:
    assert chat.API.usage(b'{"usage": {"prompt_tokens": 90, "completion_tokens": 7, '
                          b'"prompt_tokens_details": {"cached_tokens": 64, '
                          b'"cache_write_tokens": 16}}}') == UpstreamUsage(90, 64, 16, 7)
    # Anthropic's input_tokens leaves out the cache reads and writes.
    assert messages.usage(b'{"input_tokens": 10, "cache_read_input_tokens": 64, '
                          b'"cache_creation_input_tokens": 16, "output_tokens": 7}'
                          ) == UpstreamUsage(90, 64, 16, 7)
    assert responses.usage(b'{"input_tokens": 90, "input_tokens_details": '
                           b'{"cached_tokens": 64, "cache_write_tokens": 16}, '
                           b'"output_tokens": 7, "output_tokens_details": '
                           b'{"reasoning_tokens": 3}}') == UpstreamUsage(90, 64, 16, 7)
    assert responses.usage(b'{"input_tokens": 90}') == UpstreamUsage(90)


def test_upstream_headers_carry_the_key_as_each_api_wants() -> None:
    incoming = {"Authorization": "Bearer cp-client", "anthropic-beta": "b1"}
    out = messages.headers(incoming, "sk-ant")
    assert out["x-api-key"] == "sk-ant" and "Authorization" not in out
    assert out["anthropic-version"] == messages.ANTHROPIC_VERSION and out["anthropic-beta"] == "b1"
    assert responses.API.headers(incoming, "sk-oa")["Authorization"] == "Bearer sk-oa"


def test_errors_in_each_apis_shape() -> None:
    err = ApiError(400, "bad", code="x").response()
    assert json.loads(messages.API.shape(err).body)["type"] == "error"  # type: ignore[arg-type]
    assert responses.API.shape(err) is err and chat.API.shape(err) is err


def test_checks_of_each_api() -> None:
    messages.check({"model": "m", "max_tokens": 5})
    with pytest.raises(ApiError) as info:
        messages.check({"model": "m"})
    assert info.value.param == "max_tokens"
    responses.API.check({"model": "m"})
    assert responses.keeps_history({"previous_response_id": "resp_1"})
    assert not messages.API.keeps_history({"previous_response_id": "resp_1"})


def test_summary_bodies_speak_like_the_client() -> None:
    body = {"model": "m", "max_tokens": 5, "system": "S", "tools": [{"name": "f"}],
            "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 64},
            "messages": [{"role": "user", "content": "hi"}]}
    adapted = anthropic_adapter.read(body)
    ask = [*adapted.messages, {"role": "user", "content": "Summarize."}]
    riding = messages.summary_body(adapted, "m", ask, 100, True)
    for name in ("tools", "tool_choice", "thinking", "system"):
        assert riding[name] is body[name]
    assert riding["max_tokens"] == 164 and "temperature" not in riding
    bare = messages.summary_body(adapted, "m", ask, 100, False)
    assert "tools" not in bare and "tool_choice" not in bare and bare["temperature"] == 0
    rbody = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}],
             "prompt_cache_key": "k1", "tool_choice": "auto"}
    radapted = responses_adapter.read(rbody)
    rsum = responses.summary_body(radapted, "m", radapted.messages, 100, True)
    assert rsum["prompt_cache_key"] == "k1" and rsum["tool_choice"] == "none"
    assert rsum["store"] is False
    assert responses.summary_body(radapted, "m", radapted.messages, 100, False)[
        "prompt_cache_key"] == "k1"  # where the cache lives, on every call


def test_a_summary_on_the_covered_range_is_marked_where_the_client_marked_it() -> None:
    """Claude Code marks its newest message; the covered range ends before it, so the summary
    call marks the range's last block (Anthropic reads its cache only at a marker), within the
    API's four markers, never changing the client's body."""
    mark = {"type": "ephemeral"}

    def turn(n: int, marked: bool) -> list[dict[str, object]]:
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}
        return [{"role": "assistant", "content": [
                    {"type": "tool_use", "id": f"t{n}", "name": "f", "input": {}}]},
                {"role": "user", "content": [{**result, "cache_control": mark} if marked
                                             else result]}]

    body = {"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "S",
                                                        "cache_control": mark}],
            "messages": [{"role": "user", "content": "task"}, *turn(1, False),
                         *turn(2, False), *turn(3, True)]}
    kept = json.dumps(body)
    adapted = anthropic_adapter.read(body)
    covered = adapted.messages[:6]  # system, task, two turns: the third stays verbatim
    ask = [*covered, {"role": "user", "content": "notes"}, {"role": "user", "content": "Sum."}]
    riding = messages.summary_body(adapted, "m", ask, 100, True)
    end = riding["messages"][-3]["content"][-1]
    assert end["tool_use_id"] == "t2" and end["cache_control"] == mark
    assert json.dumps(body) == kept
    assert "cache_control" not in messages.summary_body(adapted, "m", ask, 100, False)[
        "messages"][-3]["content"][-1]  # a transcript call rides no cache
    unmarked = anthropic_adapter.read({**body, "messages": [
        m if m["role"] != "user" or isinstance(m["content"], str) else
        {**m, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                          for b in m["content"]]} for m in body["messages"]]})
    plain = messages.summary_body(unmarked, "m", [*unmarked.messages[:6], ask[-1]], 100, True)
    assert "cache_control" not in json.dumps(plain["messages"])  # the client marks no message
    full = {**body, "system": [{"type": "text", "text": t, "cache_control": mark}
                               for t in ("a", "b", "c", "d")]}
    four = anthropic_adapter.read(full)
    at_most = messages.summary_body(four, "m", [*four.messages[:6], ask[-1]], 100, True)
    assert "cache_control" not in json.dumps(at_most["messages"])


def test_summary_answers_of_each_api() -> None:
    got = messages.summary_answer(json.dumps({
        "content": [{"type": "text", "text": "sum"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 10}}).encode())
    assert (got.text, got.tool_call, got.usage.prompt, got.usage.cached) == ("sum", False,
                                                                              15, 10)
    called = responses.summary_answer(json.dumps({"output": [
        {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": ""}],
        "usage": {"input_tokens": 5}}).encode())
    assert called.tool_call and called.text is None


def test_a_fourth_api_is_one_more_route() -> None:
    fourth = replace(responses.API, name="responses_v2", route="/v2/responses")
    app = web.Application()
    add_routes(app, [*ADAPTED, fourth])
    names = {r.name for r in app.router.resources()}
    assert {"messages", "responses", "responses_v2"} <= names
