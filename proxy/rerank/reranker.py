"""Retrieval rerank at the service edge (SPEC section 8): one bounded model call, fail-open.

``Reranker.rerank`` takes the resolved ``rerank`` policy and the request's texts, decides with
the pure ``plan`` whether to call the model, makes at most one chat completion through the
shared ``Upstream`` and always returns a permutation of the input's indices: a timeout, an
upstream fault or an unparsable answer gives the input order. The whole call (connect, first
byte and body) is bounded by ``rerank.timeout_ms``. Metrics: ``context_proxy_rerank_total`` once
per request, ``context_proxy_rerank_duration_seconds`` once per model call, both by outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.auth import Principal
from proxy.metrics import Metrics
from proxy.policy.model import RerankPolicy
from proxy.rerank.order import Outcome, build_messages, merge, plan, rerank_order
from proxy.upstream.client import Upstream
from proxy.upstream.completion import complete

log = logging.getLogger("context_proxy.rerank")


@dataclass(frozen=True)
class Ranked:
    """What one rerank request ends with: ``order`` is a permutation of ``range(n)``."""

    order: list[int]
    outcome: Outcome
    model: str | None  # the model asked (or that would have been), for the answer's ``model``
    tokens: int  # the ranking call's ``total_tokens`` (0 when no call answered)


async def ask_model(upstream: Upstream, principal: Principal, model: str,
                    messages: list[dict[str, Any]], max_tokens: int) -> tuple[str | None, int]:
    """One chat completion through the shared upstream session: ``(content, total_tokens)``.

    Raises ``CompletionFailed`` (or the upstream's ``ApiError``) when no answer came back; the
    caller bounds the whole call with its own timeout.
    """
    answer = await complete(upstream, principal.upstream_key,
                            {"model": model, "messages": messages, "temperature": 0,
                             "max_tokens": max_tokens}, route="rerank")
    return answer.content, answer.total_tokens


class Reranker:
    def __init__(self, upstream: Upstream, metrics: Metrics) -> None:
        self.upstream = upstream
        self.metrics = metrics

    async def rerank(self, policy: RerankPolicy, principal: Principal, query: str,
                     texts: Sequence[str], request_model: str | None) -> Ranked:
        """The final order of ``texts`` for ``query``; never raises for a model failure."""
        n = len(texts)
        decision = plan(policy, n, request_model)
        outcome: Outcome
        order, outcome, tokens = merge(n, None), "skipped", 0
        if decision.candidates:
            assert decision.model is not None
            order, outcome, tokens = await self._call(principal, query, texts,
                                                      decision.candidates, decision.model,
                                                      policy.timeout_ms)
        self.metrics.rerank.labels(outcome).inc()
        return Ranked(order, outcome, decision.model, tokens)

    async def _call(self, principal: Principal, query: str, texts: Sequence[str],
                    candidates: int, model: str, timeout_ms: int
                    ) -> tuple[list[int], Outcome, int]:
        """Ask the model for the first ``candidates``; every failure gives the input order."""
        n = len(texts)
        messages = build_messages(query, texts[:candidates])
        # ~4 tokens per index ("12, ") plus the brackets: room enough, but no essay.
        max_tokens = 16 + 6 * candidates
        start = time.perf_counter()
        outcome: Outcome
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                answer, tokens = await ask_model(self.upstream, principal, model, messages,
                                                 max_tokens)
        except TimeoutError:
            order, outcome, tokens = merge(n, None), "timeout", 0
        except Exception as e:  # an ApiError (502/504), CompletionFailed, a transport error
            log.warning("rerank call failed for org %s: %s", principal.org,
                        getattr(e, "message", None) or type(e).__name__)
            order, outcome, tokens = merge(n, None), "error", 0
        else:
            order, outcome, kind = rerank_order(n, candidates, answer)
            if kind:
                log.info("rerank answer unparsable for org %s: %s", principal.org, kind)
        self.metrics.rerank_duration.labels(outcome).observe(time.perf_counter() - start)
        return order, outcome, tokens
