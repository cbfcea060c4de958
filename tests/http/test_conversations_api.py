"""The conversation routes and the chat path's own checks, on bad and edge input."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from proxy.testing.harness import Harness


def call(h: Harness, key: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = None if body is None else (body if isinstance(body, bytes) else
                                      json.dumps(body).encode())
    req = urllib.request.Request(h.base_url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stored_rows(h: Harness) -> int:
    store = h.state.store
    return sum(int(store.read_one(f"SELECT count(*) FROM {t}")[0])
               for t in ("conversations", "compactions", "spills"))


CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


@pytest.mark.parametrize("messages", [
    [{"role": "tool", "tool_call_id": "call_1", "content": "orphan"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "user", "content": "no result in between"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_2", "content": "wrong id"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": []}],
])
def test_broken_tool_sequences_are_400_and_change_nothing(harness: Harness, key: str,
                                                          messages: list[Any]) -> None:
    status, body = call(harness, key, "POST", "/chat/completions",
                        {"model": "gpt-4o", "messages": messages},
                        {"X-Conversation-Id": "broken"})
    assert status == 400
    assert body["error"]["code"] == "invalid_message_sequence"
    assert body["error"]["param"] == "messages"
    assert harness.fake.requests == []
    assert stored_rows(harness) == 0


def test_bad_conversation_id_header(harness: Harness, key: str) -> None:
    status, body = call(harness, key, "POST", "/chat/completions",
                        {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
                        {"X-Conversation-Id": "x" * 300})
    assert status == 400 and body["error"]["param"] == "X-Conversation-Id"


def test_conversation_routes(harness: Harness, key: str, sdk) -> None:
    status, _ = call(harness, key, "GET", "/conversations/never-seen/dividers")
    assert status == 404
    client = sdk(harness, key)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Conversation-Id": "seen"})
    assert raw.headers["X-Conversation-Id"] == "seen"
    assert raw.headers["X-Context-Compaction"] == "none"
    status, body = call(harness, key, "GET", "/conversations/seen/dividers")
    assert (status, body["data"]) == (200, [])
    status, body = call(harness, key, "GET", "/conversations/seen/spills/deadbeef")
    assert status == 404 and body["error"]["code"] == "spill_not_found"


def test_fingerprint_id_is_reported(harness: Harness, key: str, sdk) -> None:
    client = sdk(harness, key)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    first = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=msgs)
    more = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    second = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=more)
    assert first.headers["X-Conversation-Id"].startswith("fp-")
    assert first.headers["X-Conversation-Id"] == second.headers["X-Conversation-Id"]


@pytest.mark.parametrize("body", [b"{oops", b"[]", {"model": "m"},
                                  {"model": "m", "messages": "no"}])
def test_manual_compaction_bad_body(make_harness, body: Any) -> None:
    h = make_harness(manual_compaction=True)
    status, resp = call(h, h.create_key(), "POST", "/conversations/c/compact", body)
    assert status == 400 and "error" in resp
    assert stored_rows(h) == 0


def test_upstream_error_still_carries_context_headers(make_harness, sdk) -> None:
    from proxy.testing.fake_upstream import FakeUpstream, Fault

    h = make_harness(fake=FakeUpstream(faults=[Fault(status=500)]))
    client = sdk(h, h.create_key())
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="gpt-4o",
                                       messages=[{"role": "user", "content": "x"}], stream=True)
    assert info.value.response.headers["X-Context-Compaction"] == "none"
