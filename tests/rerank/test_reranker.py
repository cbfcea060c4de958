"""Rerank at the service edge (``proxy.rerank.reranker.Reranker``) against the fake upstream:
one bounded ranking call, whose answer orders the candidates; a timeout, an error or an
unparsable answer gives the input order; each outcome is counted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.auth import Principal
from proxy.metrics import Metrics
from proxy.policy.model import RerankPolicy
from proxy.rerank.order import SYSTEM_PROMPT
from proxy.rerank.reranker import Reranker
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.scrape import metric
from proxy.upstream.client import Upstream

POLICY = RerankPolicy(enabled=True, keep=2, candidates=3, timeout_ms=1500)
WHO = Principal("acme", None, "key_1", "sk-upstream")
TEXTS = ["alpha", "beta", "gamma", "delta"]


class Ranker:
    """The fake's answer to a ranking call: ``answer`` as its text."""

    def __init__(self) -> None:
        self.answer = "[2, 0, 1]"

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        assert body["messages"][0]["content"] == SYSTEM_PROMPT
        return {"role": "assistant", "content": self.answer}


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeUpstream, Reranker, Ranker, Metrics]]:
    ranker = Ranker()
    fake = FakeUpstream(responder=ranker)
    metrics = Metrics()
    upstream = Upstream(await fake.start(), None, 5.0, metrics)
    yield fake, Reranker(upstream, metrics), ranker, metrics
    await upstream.close()
    await fake.stop()


async def test_the_models_order_is_applied_to_the_candidates(
        served: tuple[FakeUpstream, Reranker, Ranker, Metrics]) -> None:
    fake, reranker, _, metrics = served
    ranked = await reranker.rerank(POLICY, WHO, "which?", TEXTS, "gpt-4o")
    assert (ranked.order, ranked.outcome, ranked.model) == ([2, 0, 1, 3], "applied", "gpt-4o")
    assert ranked.tokens > 0
    sent = fake.requests[-1]
    assert sent.json["temperature"] == 0 and sent.json["max_tokens"] == 16 + 6 * 3
    assert sent.headers["Authorization"] == "Bearer sk-upstream"
    assert "[2] gamma" in json.dumps(sent.json["messages"])
    assert metric(metrics.render().decode(), "context_proxy_rerank_total", outcome="applied") == 1


@pytest.mark.parametrize(("setup", "outcome"), [
    ("unparsable", "unparsable"), ("error", "error"), ("timeout", "timeout"),
    ("disabled", "skipped")])
async def test_every_failure_gives_the_input_order(
        served: tuple[FakeUpstream, Reranker, Ranker, Metrics], setup: str, outcome: str
        ) -> None:
    fake, reranker, ranker, metrics = served
    policy = POLICY
    if setup == "unparsable":
        ranker.answer = "gamma is best"
    elif setup == "error":
        fake.faults.append(Fault(status=500))
    elif setup == "timeout":
        fake.faults.append(Fault(status=200, delay_s=0.3))
        policy = RerankPolicy(enabled=True, keep=2, candidates=3, timeout_ms=50)
    else:
        policy = RerankPolicy()
    ranked = await reranker.rerank(policy, WHO, "which?", TEXTS, "gpt-4o")
    assert (ranked.order, ranked.outcome) == ([0, 1, 2, 3], outcome)
    assert (ranked.tokens > 0) == (setup == "unparsable")  # only that call was answered
    text = metrics.render().decode()
    assert metric(text, "context_proxy_rerank_total", outcome=outcome) == 1
    called = 0 if setup == "disabled" else 1
    assert metric(text, "context_proxy_rerank_duration_seconds_count", outcome=outcome) == called
