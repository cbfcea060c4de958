"""Summary calls in the request's own API (``proxy.context.summary.in_api``) against the fake
upstream: the body speaks like the client (its API headers, its cache routing, its prefix when
riding it), and a tool call, an empty answer, an error or a timeout fails as ``SummaryFailed``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.auth import Principal
from proxy.context.adapters import Adapted, anthropic
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.in_api import api_summarizers, payload
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.upstream.client import Upstream

BODY = {"model": "claude-x", "max_tokens": 64, "system": "Be terse.",
        "tools": [{"name": "read", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Read CODE-12 and fix it."}]}
WHO = Principal("acme", None, "key_1", "sk-ant")


def adapted() -> Adapted:
    return replace(anthropic.read(BODY), headers={"anthropic-beta": "b1"})


def test_the_payload_is_the_apis_summary_body() -> None:
    a = anthropic.read(BODY)
    ask = [*a.messages, {"role": "user", "content": "Summarize."}]
    riding = payload(a, "claude-x", ask, 100, True)
    assert riding["tools"] is BODY["tools"] and riding["system"] == "Be terse."
    assert "tools" not in payload(a, "claude-x", ask, 100, False)


async def test_a_summary_call_speaks_like_the_client(upstream_client: tuple[FakeUpstream, Upstream]
                                                     ) -> None:
    fake, up = upstream_client
    make = api_summarizers({"messages": up}, lambda p: {"X-Context-Proxy-Org": p.org})
    summarize = make(WHO, "claude-x", 5.0, adapted())
    answer = await summarize([{"role": "user", "content": "Summarize CODE-12."}], 100)
    assert "CODE-12" in answer.text and answer.usage.prompt > 0
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["anthropic-beta"] == "b1"
    assert sent.headers["X-Context-Proxy-Org"] == "acme" and sent.headers["x-api-key"] == \
        "sk-ant"


@pytest.mark.parametrize(("fault", "says"), [
    (Fault(status=500, path="/v1/messages"), "summary call failed"),
    (Fault(status=200, path="/v1/messages", body={
        "type": "message", "content": [{"type": "tool_use", "id": "t", "name": "read",
                                        "input": {}}], "stop_reason": "tool_use", "usage": {}}),
     "tool call"),
    (Fault(status=200, path="/v1/messages", body={
        "type": "message", "content": [{"type": "text", "text": "  "}],
        "stop_reason": "end_turn", "usage": {}}), "no text"),
    (Fault(status=200, path="/v1/messages", delay_s=0.5), "timed out")])
async def test_a_call_that_makes_no_summary_fails(upstream_client: tuple[FakeUpstream, Upstream],
                                                  fault: Fault, says: str) -> None:
    fake, up = upstream_client
    fake.faults.append(fault)
    summarize = api_summarizers({"messages": up})(WHO, "claude-x", 0.2, adapted())
    with pytest.raises(SummaryFailed, match=says):
        await summarize([{"role": "user", "content": "Summarize."}], 100)
