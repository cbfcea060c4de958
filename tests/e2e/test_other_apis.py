"""The edges of ``/v1/messages`` and ``/v1/responses``: streams, usage and cached tokens, each
API's error shape for bad input (nothing stored), passthrough keys, forwarded Anthropic
headers, a broken upstream stream, the route labels in the metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx as requests  # the SDKs' own HTTP client
import openai
import pytest

from proxy.context.identity import conversation_key
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

LONG = "Here is the log: " + "step ok; " * 900


def anthropic_client(h: Harness, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                               api_key=key or h.create_key("acme"), max_retries=0)


def test_messages_stream_relays_events_and_records_cached_usage(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness(fake=FakeUpstream(stream_chunks=3))
    turn: list[Any] = [{"role": "user", "content": LONG}]
    with anthropic_client(h) as client:
        for _ in range(2):
            with client.messages.stream(model="claude-x", max_tokens=64, messages=turn,
                                        extra_headers={"X-Conversation-Id": "st-1"}) as stream:
                texts = list(stream.text_stream)
                final = stream.get_final_message()
                headers = stream.response.headers
            turn += [{"role": "assistant", "content": final.content[0].text},
                     {"role": "user", "content": "more"}]
    assert len(texts) == 3 and headers["x-context-compaction"] == "none"
    cached = final.usage.cache_read_input_tokens or 0
    assert cached >= 1024  # the second turn's prefix, served from the fake's cache
    h.settle()  # a stream's usage is booked after its last event reached the client
    totals = h.state.context.records.usage_totals(conversation_key("acme", "st-1"))
    assert totals["claude-x"]["requests"] == 2
    assert totals["claude-x"]["cached_tokens"] == cached  # read off the streamed events
    assert totals["claude-x"]["prompt_tokens"] > cached


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"{not json", 400, "invalid_request_error"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', 400,
     "invalid_request_error"),  # no max_tokens
    (b'{"model": "m", "max_tokens": 5, "stream": "yes", "messages": []}', 400,
     "invalid_request_error"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type":'
     b' "tool_use", "id": "t1", "name": "f", "input": {}}]}, {"role": "user", "content": "no"}]}',
     400, "invalid_request_error"),
    (b'[1, 2]', 400, "invalid_request_error"),
])
def test_bad_messages_get_anthropics_error_shape(make_harness: Callable[..., Harness],
                                                  body: bytes, status: int, kind: str) -> None:
    h = make_harness()
    key = h.create_key("acme")
    resp = requests.post(h.base_url + "/messages", content=body, timeout=10,
                         headers={"x-api-key": key, "Content-Type": "application/json"})
    assert resp.status_code == status
    doc = resp.json()
    assert doc["type"] == "error" and doc["error"]["type"] == kind and doc["error"]["message"]
    assert not [r for r in h.fake.requests if r.path == "/v1/messages"]  # nothing sent on
    assert h.state.store.read_one("SELECT COUNT(*) FROM conversations")[0] == 0


def test_wrong_key_and_wrong_method_on_messages(make_harness: Callable[..., Harness]) -> None:
    h = make_harness()
    with anthropic_client(h, "cp-not-a-key") as client, \
            pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(model="m", max_tokens=5,
                               messages=[{"role": "user", "content": "x"}])
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    resp = requests.get(h.base_url + "/messages", timeout=10)
    assert resp.status_code == 405 and resp.json()["type"] == "error"


@pytest.mark.parametrize("items", [
    [{"type": "function_call_output", "call_id": "nope", "output": "x"}],
    [{"type": {"kind": "message"}, "role": "user", "content": "x"}],
    "not-a-list-or-string-but-a-number",
])
def test_bad_responses_get_openais_error_shape(make_harness: Callable[..., Harness],
                                                items: Any) -> None:
    h = make_harness()
    body = {"model": "m", "input": 7 if items == "not-a-list-or-string-but-a-number" else items}
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0) as c, \
            pytest.raises(openai.BadRequestError) as info:
        c.post("/responses", cast_to=object, body=body)
    assert info.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert info.value.response.headers["x-should-retry"] == "false"
    assert not [r for r in h.fake.requests if r.path == "/v1/responses"]


def test_passthrough_forwards_the_clients_anthropic_key_and_headers(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness(env={"CONTEXT_PROXY_AUTH_MODE": "passthrough"})
    with anthropic_client(h, "sk-ant-client-own-key") as client:
        client.messages.create(model="claude-x", max_tokens=5,
                               messages=[{"role": "user", "content": "hi"}],
                               extra_headers={"anthropic-beta": "tools-2099-01-01"},
                               extra_query={"beta": "true"})  # as Claude Code sends it
    assert h.fake.requests[-1].query == "beta=true"
    sent = {k.lower(): v for k, v in h.fake.requests[-1].headers.items()}
    assert sent["x-api-key"] == "sk-ant-client-own-key" and "authorization" not in sent
    assert sent["anthropic-beta"] == "tools-2099-01-01" and sent["anthropic-version"]


def test_proxy_keys_send_the_platforms_anthropic_key(make_harness: Callable[..., Harness]
                                                     ) -> None:
    h = make_harness()
    key = h.create_key("acme")
    with anthropic_client(h, key) as client:
        client.messages.create(model="claude-x", max_tokens=5,
                               messages=[{"role": "user", "content": "hi"}])
    sent = {k.lower(): v for k, v in h.fake.requests[-1].headers.items()}
    assert sent["x-api-key"] == "sk-ant-upstream-secret-0123456789"
    assert key not in str(sent)


def test_a_broken_upstream_stream_ends_with_anthropics_error_event(
        make_harness: Callable[..., Harness]) -> None:
    fake = FakeUpstream(stream_chunks=6, faults=[Fault(status=200, mode="reset",
                                                       path="/v1/messages")])
    h = make_harness(fake=fake)
    with anthropic_client(h) as client, pytest.raises(anthropic.APIStatusError) as info, \
            client.messages.stream(model="claude-x", max_tokens=5,
                                   messages=[{"role": "user", "content": "hi there"}]) as s:
        list(s.text_stream)
    assert "ended unexpectedly" in str(info.value)


def test_metrics_label_each_api(make_harness: Callable[..., Harness]) -> None:
    h = make_harness()
    key = h.create_key("acme")
    with anthropic_client(h, key) as client:
        client.messages.create(model="claude-x", max_tokens=5,
                               messages=[{"role": "user", "content": "hi"}])
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as c:
        c.responses.create(model="gpt-x", input="hi")
    text = scrape(h.base_url)
    for route in ("messages", "responses"):
        assert metric(text, "context_proxy_requests_total", route=route, status_class="2xx") == 1


def test_other_messages_paths_go_to_the_anthropic_upstream(make_harness: Callable[..., Harness]
                                                          ) -> None:
    h = make_harness()
    key = h.create_key("acme")
    with anthropic_client(h, key) as client:
        client.post("/v1/messages/count_tokens", cast_to=object,
                    body={"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]})
    rec = h.fake.requests[-1]
    sent = {k.lower(): v for k, v in rec.headers.items()}
    assert rec.path == "/v1/messages/count_tokens"
    assert sent["x-api-key"] == "sk-ant-upstream-secret-0123456789" and key not in str(sent)


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_manual_compaction_on_each_api(make_harness: Callable[..., Harness], api: str) -> None:
    h = make_harness(fake=FakeUpstream(models={"claude-x": 8_000, "gpt-x": 8_000}),
                     env={"CONTEXT_PROXY_MANUAL_COMPACTION": "true"})
    key = h.create_key("acme")
    turns: list[Any] = []
    for i in range(12):
        turns += [{"role": "user", "content": f"Question {i}: " + "details " * 120},
                  {"role": "assistant", "content": f"Answer {i}: FACT-{i} noted."}]
    turns.append({"role": "user", "content": "And now?"})
    headers = {"X-Context-Compact": "now", "X-Conversation-Id": f"manual-{api}"}
    if api == "messages":  # streamed: the ": context-compacted" comment comes first
        with anthropic_client(h, key) as client, client.messages.stream(
                model="claude-x", max_tokens=5, messages=turns, extra_headers=headers) as s:
            assert s.get_final_message().content[0].type == "text"
            got = s.response.headers
    else:
        with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as c:
            got = c.responses.with_raw_response.create(model="gpt-x", input=turns,
                                                       extra_headers=headers).headers
    assert got["x-context-compaction"] == "manual"
    assert got["x-context-divider-id"].startswith("div_")
    sent = h.fake.api_requests(f"/v1/{api}", summaries=False)[-1]
    listed = sent["messages"] if api == "messages" else sent["input"]
    assert len(listed) < len(turns) and listed[-1] == turns[-1]
    assert h.fake.api_requests(f"/v1/{api}", summaries=True)  # the summary in the same API
    assert h.fake.refusals() == []


def test_the_fake_answers_count_tokens_and_records_its_refusals(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness(fake=FakeUpstream())
    base = h.fake.base_url
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    counted = requests.post(f"{base}/messages/count_tokens", json=body)
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    refused = requests.post(f"{base}/messages", json={"model": "m"})
    assert refused.status_code == 400
    assert [(r.path, r.status) for r in h.fake.requests] == [
        ("/v1/messages/count_tokens", 200), ("/v1/messages", 400)]
    assert "max_tokens" in (h.fake.requests[-1].error or "")
    # The proxy relays count_tokens to the Anthropic upstream; its answers are recorded.
    via = requests.post(f"{h.base_url}/messages/count_tokens", json=body,
                     headers={"x-api-key": h.create_key("acme")})
    assert via.status_code == 200, via.text
    assert h.answers[-1].path == "/v1/messages/count_tokens" and h.answers[-1].status == 200
