"""The summary call against a real (fake) upstream, through the shared session."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.summarizer import Answer, upstream_summarizer
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.upstream.client import Upstream

PROMPT = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"},
          {"role": "assistant", "content": None, "tool_calls": [
              {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "out CODE-77"},
          {"role": "user", "content": "Summarize the conversation above."}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


async def summarize_with(fake: FakeUpstream, **kw: Any) -> tuple[Any, Answer]:
    upstream = Upstream(await fake.start(), None, 10)
    try:
        call = upstream_summarizer(upstream, "sk-key", "gpt-4o", 5)
        return fake, await call(PROMPT, 200, **kw)
    finally:
        await upstream.close()
        await fake.stop()


async def test_the_call_sends_the_messages_exactly_with_tools_and_no_tool_choice() -> None:
    fake, answer = await summarize_with(
        FakeUpstream(responder=lambda body: {"role": "assistant", "content": "SUMMARY"}),
        tools=TOOLS)
    body = fake.requests[-1].json
    assert body["messages"] == PROMPT  # nothing dropped, not even content: null
    assert body["tools"] == TOOLS and body["tool_choice"] == "none"
    assert body["max_tokens"] == 200 and body["stream"] is False
    assert fake.requests[-1].headers["Authorization"] == "Bearer sk-key"
    assert answer.text == "SUMMARY" and answer.usage.prompt > 0


async def test_without_tools_no_tool_choice_is_sent() -> None:
    fake, _ = await summarize_with(
        FakeUpstream(responder=lambda body: {"role": "assistant", "content": "S"}))
    assert "tools" not in fake.requests[-1].json
    assert "tool_choice" not in fake.requests[-1].json


@pytest.mark.parametrize("fake", [
    FakeUpstream(responder=lambda body: {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
    FakeUpstream(responder=lambda body: {"role": "assistant", "content": "  "}),
    FakeUpstream(faults=[Fault(status=500)]),
    FakeUpstream(faults=[Fault(status=200, body={"not": "a completion"})]),
    FakeUpstream(faults=[Fault(drop=True)]),
])
async def test_a_failed_call_raises_summary_failed(fake: FakeUpstream) -> None:
    with pytest.raises(SummaryFailed):
        await summarize_with(fake)


async def test_a_slow_upstream_times_out() -> None:
    fake = FakeUpstream(faults=[Fault(delay_s=3, status=200)])
    upstream = Upstream(await fake.start(), None, 10)
    try:
        call = upstream_summarizer(upstream, None, "gpt-4o", 0.2)
        with pytest.raises(SummaryFailed, match="timed out"):
            await call(PROMPT, 100)
    finally:
        await upstream.close()
        await fake.stop()


async def test_the_cache_reports_reach_the_answer() -> None:
    fake = FakeUpstream(responder=lambda body: {"role": "assistant", "content": "S"})
    fake.cache.min_tokens = 1  # a tiny prompt: let the cache serve it anyway
    fake.cache.step = 1
    upstream = Upstream(await fake.start(), None, 10)
    try:
        call = upstream_summarizer(upstream, "k", "gpt-4o", 5)
        first, second = await call(PROMPT, 50), await call(PROMPT, 50)
        assert first.usage.cached == 0 < second.usage.cached <= second.usage.prompt
    finally:
        await upstream.close()
        await fake.stop()
