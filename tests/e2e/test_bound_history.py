"""Property: on a model that binds reasoning to its history (SPEC section 5), every request the
proxy sends passes the provider's prefix check, over random agent sessions that mask and
compact; and what the proxy does not rewrite reaches the upstream byte for byte.

The client is the ``anthropic`` SDK with adaptive thinking, replaying every block the fake
issued exactly as it came; the strict fake binds each thinking block it issues to a digest of
its prefix and refuses (400, "bound to a different conversation") any replayed block whose
prefix changed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from factories import synchronous_policies, words
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.context.stages.shared import SUMMARY_OPEN
from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES, as_chat
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

MODEL = "claude-opus-5-5"
WINDOW = 16_384
TOOLS = [{"name": "read_file", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def read_next(body: dict[str, Any]) -> dict[str, Any]:
    """The fake's model: one more file read per turn (ids unique in the conversation)."""
    n = len(body.get("messages") or [])
    return {"role": "assistant", "content": f"Reading file {n}.", "tool_calls": [
        {"id": f"toolu_{n:04d}", "type": "function", "function": {
            "name": "read_file", "arguments": json.dumps({"path": f"src/f{n}.py"})}}]}


@pytest.fixture
def bound(make_harness: Callable[..., Harness], tmp_path: Path) -> Iterator[Harness]:
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=read_next)
    yield make_harness(fake=fake, env=synchronous_policies(tmp_path / "policies"))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _part_of(message: dict[str, Any], whole: dict[str, Any]) -> bool:
    """Whether ``message``'s blocks are some of ``whole``'s, unchanged and in order."""
    rest = iter(_blocks(whole))
    return message["role"] == whole["role"] and all(
        any(b == c for c in rest) for b in _blocks(message))


def _untouched_problems(sent: dict[str, Any], client: list[dict[str, Any]]) -> list[str]:
    """What breaks "not rewritten means byte-identical": an upstream message that is neither
    one of the client's as it was, nor the proxy's summary, nor a masked copy (a result's
    content replaced, every other field and block the same); a thinking block that is not
    one the client sent."""
    theirs = [json.dumps(m, sort_keys=True) for m in client]
    thinking = {json.dumps(b, sort_keys=True) for m in client for b in _blocks(m)
                if b.get("type") == "thinking"}
    problems = []
    for i, m in enumerate(sent["messages"]):
        if json.dumps(m, sort_keys=True) in theirs:
            continue
        text = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
        if SUMMARY_OPEN in text:
            continue
        masked = [b for b in _blocks(m) if b.get("type") == "tool_result"]
        if m["role"] == "user" and masked and any(
                [{**b, "content": None} for b in _blocks(m)]
                == [{**b, "content": None} for b in _blocks(c)] for c in client):
            continue
        if m["role"] == "user" and any(_part_of(m, c) for c in client):
            continue  # the kept part of a message whose tool results a compaction covered
        problems.append(f"messages.{i} is neither the client's nor the proxy's: {text[:200]}")
        for b in _blocks(m):
            if b.get("type") == "thinking" and json.dumps(b, sort_keys=True) not in thinking:
                problems.append(f"messages.{i} holds a thinking block the client never sent")
    return problems


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(40, 2_400), min_size=12, max_size=32),
       follow_ups=st.sets(st.integers(0, 31), max_size=4), streamed=st.booleans())
def test_every_request_passes_the_prefix_check(bound: Harness, sizes: list[int],
                                               follow_ups: set[int], streamed: bool) -> None:
    conversation = str(uuid.uuid4())
    first = len(bound.fake.requests)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    sent_for: list[list[dict[str, Any]]] = []
    with anthropic.Anthropic(base_url=bound.base_url.removesuffix("/v1"), max_retries=0,
                             api_key=bound.create_key("acme")) as client:
        for turn, size in enumerate(sizes):
            kwargs: dict[str, Any] = dict(
                model=MODEL, max_tokens=2048, system="You read files.", tools=TOOLS,
                messages=messages, thinking={"type": "adaptive"},
                extra_headers={"X-Conversation-Id": conversation})
            if streamed and turn % 2:
                with client.messages.stream(**kwargs) as stream:
                    answer = stream.get_final_message()
            else:
                answer = client.messages.create(**kwargs)
            sent_for.append(json.loads(json.dumps(messages)))
            content = [b.model_dump(exclude_none=True) for b in answer.content]
            assert content[0]["type"] == "thinking"
            calls = [b for b in content if b["type"] == "tool_use"]
            results: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": c["id"], "content": words(size, turn)}
                for c in calls]
            if turn in follow_ups:
                results.append({"type": "text", "text": f"Also note item {turn}."})
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": results}]
    mine = [r for r in bound.fake.requests[first:] if r.path == MESSAGES]
    assert [r.refused for r in mine if r.refused] == []
    main = [r.json for r in mine if not is_summary_request(as_chat(MESSAGES, r.json))]
    assert len(main) == len(sizes)
    problems = [p for body, client_sent in zip(main, sent_for, strict=False)
                for p in _untouched_problems(body, client_sent)]
    assert problems == []


def test_masking_without_compaction_asks_the_provider_to_drop_not_refuse(
        make_harness: Callable[..., Harness], tmp_path: Path) -> None:
    """Compaction off (an admin's choice): masking alone keeps the session in the window, and
    each step changes what bound thinking blocks follow. The proxy then sends Anthropic's
    binding controls (``drop_block`` under its beta), so no request is refused; what the
    provider drops is counted as lost reasoning."""
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=read_next)
    env = synchronous_policies(tmp_path / "policies", "defaults: {compaction: {enabled: false},"
                               " masking: {priced: false}}\n")
    h = make_harness(fake=fake, env=env)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    masked = []
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"), max_retries=0,
                             api_key=h.create_key("acme")) as client:
        for turn in range(30):
            raw = client.messages.with_raw_response.create(
                model=MODEL, max_tokens=2048, system="You read files.", tools=TOOLS,
                messages=messages, thinking={"type": "adaptive"})
            masked.append(int(raw.headers["x-context-masked"]))
            content = [b.model_dump(exclude_none=True) for b in raw.parse().content]
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": b["id"],
                              "content": words(700, turn)}
                             for b in content if b["type"] == "tool_use"]}]
    assert max(masked) > 0, "masking never stepped: the test shows nothing"
    sent = [r for r in fake.requests if r.path == MESSAGES]
    assert [r.refused for r in sent if r.refused] == []
    controlled = [r for r in sent if (r.json.get("thinking") or {}).get("block_binding")]
    assert controlled and all("thinking-binding-controls-2026-08-01"
                              in r.headers.get("anthropic-beta", "") for r in controlled)
    assert not any((r.json.get("thinking") or {}).get("block_binding") for r in sent[:3])
    dropped = sum(r.dropped for r in sent)
    assert dropped > 0
    assert metric(scrape(h.base_url), "context_proxy_reasoning_lost_total", model=MODEL,
                  cause="provider") == dropped


RESPONSES_MODEL = "gpt-5.6"


@pytest.fixture
def bound_responses(make_harness: Callable[..., Harness], tmp_path: Path) -> Iterator[Harness]:
    fake = FakeUpstream(models={RESPONSES_MODEL: WINDOW}, responder=read_next)
    yield make_harness(fake=fake, env=synchronous_policies(tmp_path / "policies"))


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(40, 2_400), min_size=12, max_size=32), streamed=st.booleans())
def test_no_reasoning_item_is_dropped_over_random_sessions(
        bound_responses: Harness, sizes: list[int], streamed: bool) -> None:
    """The same on the Responses API: the strict fake drops (and lists in
    ``input_transformations``) any replayed reasoning item whose prefix changed; through the
    proxy it drops none, over sessions that mask and compact."""
    h, conversation = bound_responses, str(uuid.uuid4())
    first = len(h.fake.requests)
    items: list[Any] = [{"role": "user", "content": "Read every file."}]
    tools = [{"type": "function", "name": "read_file", "description": "Read a file.",
              "parameters": TOOLS[0]["input_schema"]}]
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"),
                       max_retries=0) as client:
        for turn, size in enumerate(sizes):
            kwargs: dict[str, Any] = dict(
                model=RESPONSES_MODEL, instructions="You read files.", input=items,
                tools=tools, reasoning={"effort": "medium"},
                extra_headers={"X-Conversation-Id": conversation})
            if streamed and turn % 2:
                with client.responses.stream(**kwargs) as stream:
                    answer = stream.get_final_response()
            else:
                answer = client.responses.create(**kwargs)
            output = [o.model_dump(exclude_none=True) for o in answer.output]
            assert output[0]["type"] == "reasoning"
            items += output + [{"type": "function_call_output", "call_id": o["call_id"],
                                "output": words(size, turn)}
                               for o in output if o["type"] == "function_call"]
    mine = [r for r in h.fake.requests[first:] if r.path == RESPONSES]
    assert [r.refused for r in mine if r.refused] == []
    assert [r.dropped for r in mine if r.dropped] == []
