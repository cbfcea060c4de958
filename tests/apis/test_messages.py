"""Anthropic's Messages API as the proxy means it (``proxy.apis.messages``): usage with the cache
reads and writes added back, the key as ``x-api-key`` with a default version, ``max_tokens``
required, and summary calls that speak like the client (riding its cached prefix or not)."""

from __future__ import annotations

import json

import pytest

from proxy.apis import messages
from proxy.context.adapters import anthropic as anthropic_adapter
from proxy.errors import ApiError
from proxy.upstream.usage import UpstreamUsage

BODY = {"model": "m", "max_tokens": 5, "system": "S", "tools": [{"name": "f"}],
        "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 64},
        "messages": [{"role": "user", "content": "hi"}]}


def test_input_tokens_leave_out_the_cache_which_is_added_back() -> None:
    assert messages.usage(b'{"input_tokens": 10, "cache_read_input_tokens": 64, '
                          b'"cache_creation_input_tokens": 16, "output_tokens": 7}'
                          ) == UpstreamUsage(90, 64, 16, 7)
    assert messages.usage(b'{"type": "ping"}') == UpstreamUsage()


def test_the_key_goes_as_x_api_key_with_a_version() -> None:
    incoming = {"Authorization": "Bearer cp-client", "anthropic-beta": "b1"}
    out = messages.headers(incoming, "sk-ant")
    assert out["x-api-key"] == "sk-ant" and "Authorization" not in out
    assert out["anthropic-version"] == messages.ANTHROPIC_VERSION and out["anthropic-beta"] == "b1"
    assert messages.headers({"anthropic-version": "2024-01-01"}, None)[
        "anthropic-version"] == "2024-01-01"


def test_max_tokens_is_required_as_an_integer() -> None:
    messages.check({"model": "m", "max_tokens": 5})
    for body in ({"model": "m"}, {"model": "m", "max_tokens": True}):
        with pytest.raises(ApiError) as info:
            messages.check(body)
        assert info.value.param == "max_tokens"
    assert not messages.API.keeps_history({"previous_response_id": "resp_1"})


def test_summary_bodies_speak_like_the_client() -> None:
    adapted = anthropic_adapter.read(BODY)
    ask = [*adapted.messages, {"role": "user", "content": "Summarize."}]
    riding = messages.summary_body(adapted, "m", ask, 100, True)
    for name in ("tools", "tool_choice", "thinking", "system"):
        assert riding[name] is BODY[name]
    assert riding["max_tokens"] == 164 and "temperature" not in riding  # room for thinking
    bare = messages.summary_body(adapted, "m", ask, 100, False)
    assert "tools" not in bare and "tool_choice" not in bare and bare["temperature"] == 0
    off = anthropic_adapter.read({**BODY, "thinking": {"type": "disabled", "budget_tokens": 64}})
    assert messages.summary_body(off, "m", ask, 100, True)["max_tokens"] == 100


def test_summary_answers_join_the_text_and_tell_a_tool_use() -> None:
    got = messages.summary_answer(json.dumps({
        "content": [{"type": "text", "text": "su"}, {"type": "thinking", "thinking": "x"},
                    {"type": "text", "text": "m"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 10}}).encode())
    assert (got.text, got.tool_call, got.usage.prompt, got.usage.cached) == ("sum", False,
                                                                              15, 10)
    tool = messages.summary_answer(json.dumps({
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        "stop_reason": "tool_use", "usage": {}}).encode())
    assert tool.tool_call and tool.text is None


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
