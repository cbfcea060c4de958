"""Shadow mode (policy ``mode: shadow``) through a served proxy: the upstream receives the client's
exact bytes and no summary call, on every API and streamed; the answers, ``/metrics`` and the
console's organization totals say what the proxy would have done; and over the session-cost
bench's 40-turn agent session at 32k the would-be savings are those managed mode makes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from factories import words

from proxy.console.queries import usage_by_org
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import shadow_run
from proxy.testing.fake import fake_apis
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

SPEC = shadow_run.agent.AgentSpec(seed=11, output_tokens=(1200, 4200), thought_words=(10, 40))
MODEL = "shadow-model"
TOOL = {"name": "read_file", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
FUNCTION = {"type": "function", "name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}


def test_forty_turns_at_32k_in_shadow_send_the_clients_bytes_and_report_managed_savings(
        ) -> None:
    """The session-cost bench's shape: the fake writes summaries of their budget (3,200
    tokens at 32k), what shadow mode's estimate assumes."""
    managed = shadow_run.play("managed", 40, 32_000, SPEC, summary_tokens=3_200)
    shadow = shadow_run.play("shadow", 40, 32_000, SPEC, summary_tokens=3_200)
    assert len(shadow.sent) == len(shadow.received) == 40
    assert all(sent == got for sent, got in zip(shadow.sent, shadow.received, strict=True))
    assert shadow.summary_calls == 0 and managed.summary_calls >= 3
    assert managed.received != managed.sent  # managed mode did rewrite the session
    would = [h["x-context-shadow-compaction"] for h in shadow.headers]
    assert would.count("auto") == managed.summary_calls
    assert {h["x-context-compaction"] for h in shadow.headers} == {"none"}
    assert abs(shadow.saved_tokens / managed.saved_tokens - 1) <= 0.10
    assert managed.saved_usd > 0 and abs(shadow.saved_usd / managed.saved_usd - 1) <= 0.10


def _messages(turns: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Reading file {i}."},
            {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "read_file",
             "input": {"path": f"f{i}.py"}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result",
                                                  "tool_use_id": f"toolu_{i:04d}",
                                                  "content": words(500, i)}]})
    return {"model": MODEL, "max_tokens": 64, "tools": [TOOL], "messages": msgs}


def _responses(turns: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(turns):
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": "read_file",
                   "arguments": json.dumps({"path": f"f{i}.py"})},
                  {"type": "function_call_output", "call_id": f"call_{i}",
                   "output": words(500, i)}]
    return {"model": MODEL, "tools": [FUNCTION], "input": items}


def _chat(turns: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})}}]},
                 {"role": "tool", "tool_call_id": f"call_{i}", "content": words(500, i)}]
    return {"model": MODEL, "tools": [{"type": "function", "function": {
        "name": "read_file", "parameters": FUNCTION["parameters"]}}], "messages": msgs}


ROUTES: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    "/v1/chat/completions": ("/chat/completions", _chat),
    fake_apis.MESSAGES: ("/messages", _messages),
    fake_apis.RESPONSES: ("/responses", _responses),
}


def test_every_api_streamed_or_whole_goes_upstream_unchanged_in_shadow_mode(
        make_harness: Callable[..., Harness]) -> None:
    window = 9_000  # 16 turns of ~530 tokens: past the compaction trigger
    layer = validate_layer({"mode": "shadow", "masking.enabled": False, "models": {MODEL: {
        "context_window": window, "input_per_mtok": 2.0, "cached_per_mtok": 0.2}}})
    h = make_harness(fake=FakeUpstream(stream_chunks=2),
                     platform=PlatformConfig(defaults=layer))
    key = h.create_key("acme")
    for path, (route, make) in ROUTES.items():
        for stream in (False, True):
            raw = json.dumps({**make(16), "stream": stream}).encode()
            answer = httpx.post(h.base_url + route, content=raw, timeout=30, headers={
                "Authorization": f"Bearer {key}", "Content-Type": "application/json",
                "X-Conversation-Id": f"shadow-{route}-{stream}"})
            assert answer.status_code == 200, answer.text
            assert (h.fake.requests[-1].path, h.fake.requests[-1].body) == (path, raw)
            head = answer.headers
            assert (head["X-Context-Mode"], head["X-Context-Compaction"],
                    head["X-Context-Masked"]) == ("shadow", "none", "0")
            assert head["X-Context-Shadow-Compaction"] == "auto"
            assert int(head["X-Context-Shadow-Tokens-After"]) < \
                int(head["X-Context-Tokens-Before"]) == int(head["X-Context-Tokens-After"])
            assert int(head["X-Context-Shadow-Saved-Tokens"]) > 0
            assert "X-Context-Shadow-Saved-Usd" in head
    assert not [r for r in h.fake.requests
                if is_summary_request(fake_apis.as_chat(r.path, r.json)
                                      if r.path != "/v1/chat/completions" else r.json)]
    assert h.metric("context_proxy_shadow_requests_total", org="acme", model=MODEL) == 6
    assert h.metric("context_proxy_shadow_compactions_total", org="acme", model=MODEL) == 6
    assert h.metric("context_proxy_shadow_saved_tokens_total", org="acme", model=MODEL) > 0
    assert h.metric("context_proxy_compactions_total") == 0  # nothing was done
    h.call(h.state.context.records.flush_usage())
    org = usage_by_org(h.state.store)["acme"].org
    assert org.counts["shadow_requests"] == 6 and org.counts["shadow_saved_tokens"] > 0
    assert org.counts["tokens_received"] == org.counts["tokens_sent"]
    stored = h.state.store.read("SELECT COUNT(*) AS n FROM compactions")
    spills = h.state.store.read("SELECT COUNT(*) AS n FROM spills")
    assert (stored[0]["n"], spills[0]["n"]) == (0, 0)
