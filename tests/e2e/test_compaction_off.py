"""Compaction switched off (a supported admin choice): masking alone keeps every request of an
agent session in the window, on chat completions, the Responses API and the Messages API, driven
by the official SDKs against the fake, which refuses a request over the window. The masking
steps here do not pay for themselves by price (writes at 50x input); they are taken because
the list would otherwise pass compaction's trigger (the matrix's shapes:
``bench/compaction_off.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

WINDOW = 32_000
TURNS = 30
SPEC = agent.AgentSpec(seed=11, output_tokens=(1000, 4000), thought_words=(10, 40))



def off(model: str) -> PlatformConfig:
    """Compaction off, and cache writes so dear (50x input) that no masking step pays for
    itself by price: only the rule that keeps the list in the window steps."""
    return PlatformConfig(defaults=validate_layer({"compaction.enabled": False, "models": {
        model: {"context_window": WINDOW, "input_per_mtok": 1.0, "cached_per_mtok": 0.1,
                "write_per_mtok": 50.0}}}))


def chat(h: Harness, model: str) -> int:
    """The session on chat completions; the failed requests."""
    failed = 0
    messages = agent.opening_messages(SPEC)
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"),
                       max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            h.fake.responder = lambda body, a=assistant: a
            try:
                client.chat.completions.create(model=model, messages=messages,  # type: ignore[arg-type]
                                               tools=agent.TOOLS)  # type: ignore[arg-type]
            except openai.APIError:
                failed += 1
            messages = [*messages, assistant, *results]
    return failed


def responses(h: Harness, model: str) -> int:
    """The session on the Responses API, its output items replayed; the failed requests."""
    failed = 0
    opening = agent.opening_messages(SPEC)
    items: list[Any] = [{"role": "user", "content": opening[1]["content"]}]
    tools: Any = [{"type": "function", **t["function"]} for t in agent.TOOLS]
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"),
                       max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            h.fake.responder = lambda body, a=assistant: a
            try:
                out = client.responses.create(model=model, input=items, tools=tools,
                                              instructions=str(opening[0]["content"]))
                items += [o.model_dump(exclude_none=True) for o in out.output]
            except openai.APIError:
                failed += 1
                items += [{"type": "function_call", "call_id": c["id"], "arguments": "{}",
                           "name": c["function"]["name"]} for c in assistant["tool_calls"]]
            items += [{"type": "function_call_output", "call_id": r["tool_call_id"],
                       "output": r["content"]} for r in results]
    return failed


def messages_api(h: Harness, model: str) -> int:
    """The session on the Messages API; the failed requests."""
    failed = 0
    opening = agent.opening_messages(SPEC)
    tools: Any = [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in agent.TOOLS]
    msgs: list[Any] = [{"role": "user", "content": opening[1]["content"]}]
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                             api_key=h.create_key("acme"), max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            h.fake.responder = lambda body, a=assistant: a
            try:
                answer = client.messages.create(model=model, max_tokens=1024, tools=tools,
                                                system=str(opening[0]["content"]),
                                                messages=msgs)
                content = [b.model_dump(exclude_none=True) for b in answer.content]
            except anthropic.APIError:
                failed += 1
                content = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                            "input": {}} for c in assistant["tool_calls"]]
            msgs += [{"role": "assistant", "content": content}, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": r["tool_call_id"],
                 "content": r["content"]} for r in results]}]
    return failed


PLAYERS: dict[str, tuple[str, Callable[[Harness, str], int]]] = {
    "chat": ("gpt-4o-w32k", chat), "responses": ("gpt-5.6-w32k", responses),
    "messages": ("claude-agent-w32k", messages_api)}


@pytest.mark.parametrize("api", sorted(PLAYERS))
def test_with_compaction_off_no_request_passes_the_window(
        make_harness: Callable[..., Harness], api: str) -> None:
    model, player = PLAYERS[api]
    h = make_harness(fake=FakeUpstream(models={model: WINDOW}), platform=off(model))
    assert player(h, model) == 0
    prompts = [r.usage for r in h.fake.requests if r.usage is not None]
    assert len(prompts) == TURNS and not h.fake.refusals()
    sizes = [int(u.get("prompt_tokens") or u.get("input_tokens") or 0)
             + int(u.get("cache_read_input_tokens") or 0)
             + int(u.get("cache_creation_input_tokens") or 0) for u in prompts]
    # It got near, and stayed under compaction's trigger (0.8 of the window), which the list
    # is kept from passing, not only under the window.
    assert 0.6 * WINDOW < max(sizes) <= 0.8 * WINDOW
    masked = [r for r in h.fake.requests if "[tool output cleared: " in r.body.decode()]
    assert masked  # masking did it
