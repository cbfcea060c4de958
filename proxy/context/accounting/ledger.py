"""The books of what the upstream reported and what it cost: each call's tokens (cache reads
and writes included) and money (``proxy.context.accounting.money``), counted in the metrics
and in the records (per conversation and model, per organization and hour).

The "without the proxy" baseline of a conversation (its client's previous request) is kept in
this process's memory, bounded: a conversation first seen here is priced as the client's first
request (nothing read from cache), which on replicas sharing one store may overstate what a
turn served by another replica saved.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from proxy.context.accounting import money
from proxy.context.accounting.money import Baseline, Money, Prices
from proxy.context.job import Job
from proxy.context.records.compactions import Records
from proxy.context.report import ContextReport
from proxy.context.stages.scope import StepPrices
from proxy.metrics import Metrics
from proxy.policy.model import ModelPrices, Policy
from proxy.upstream.model_map import model_map
from proxy.upstream.usage import UpstreamUsage

_BASELINES = 10_000  # conversations remembered
_PRICED = 1_024  # (model, policy prices) pairs whose prices are kept


class Ledger:
    """Prices and books upstream calls. ``cost_map``: litellm's model map (read once, in a
    thread: ``ready``)."""

    def __init__(self, records: Records, metrics: Metrics,
                 cost_map: Callable[[], Mapping[str, Any]] = model_map) -> None:
        self.records = records
        self.metrics = metrics
        self._load = cost_map
        self._map: Mapping[str, Any] | None = None
        self._baselines: OrderedDict[str, Baseline] = OrderedDict()
        # Prices depend only on the model, its policy entry and the cost map, which is read
        # once: worked out once per pair rather than on every call.
        self._priced: dict[tuple[str, ModelPrices], Prices] = {}

    @property
    def is_ready(self) -> bool:
        """Whether the cost map has been read (``ready`` has nothing to do)."""
        return self._map is not None

    async def ready(self) -> None:
        """Read the cost map off the event loop the first time (a file of megabytes)."""
        if self._map is None:
            self._map = await asyncio.to_thread(self._load)

    def prices(self, model: str, policy: Policy) -> Prices:
        key = (model, money.own_prices(model, policy.prices))
        found = self._priced.get(key)
        if found is None:
            found = money.prices(model, policy.prices, self._map or {})
            if self._map is not None:  # before the map is read, prices are not final
                if len(self._priced) >= _PRICED:
                    self._priced.clear()
                self._priced[key] = found
        return found

    def step_prices(self, model: str, policy: Policy) -> StepPrices:
        """``model``'s cached and written token prices in its input prices, for masking's
        decisions (``StepPrices``' defaults when its input price is unknown)."""
        p = self.prices(model, policy)
        if p.input <= 0:
            return StepPrices()
        return StepPrices(read=p.cached / p.input, write=p.written / p.input)

    def baseline(self, key: str) -> Baseline | None:
        """The client's previous request of conversation ``key``, as last booked."""
        return self._baselines.get(key)

    def actual(self, job: Job, report: ContextReport, usage: UpstreamUsage) -> Money:
        """The money of a request whose upstream answer reported ``usage``."""
        p = self.prices(job.request.model, job.policy)
        mine = money.without_proxy(usage, report.tokens_before, report.tokens_after,
                                   report.messages is None, self._baselines.get(job.key),
                                   usage.dropped + report.reasoning_removed)
        return Money(money.cost(usage, p), money.cost(mine, p))

    def estimate(self, job: Job, report: ContextReport) -> Money:
        """The money of a request from its prompt side, before the upstream answers."""
        previous = self._baselines.get(job.key)
        return money.estimate(report.tokens_before, report.tokens_after, report.prefix_kept,
                              report.messages is None, previous,
                              self.prices(job.request.model, job.policy),
                              previous is not None and previous.writes)

    def book(self, job: Job, report: ContextReport, usage: UpstreamUsage,
             priced: Money | None = None) -> Money:
        """Count a managed request's upstream call and remember it as the conversation's
        baseline; returns its money (``priced`` when the caller priced it already)."""
        priced = priced or self.actual(job, report, usage)
        self._count(job, job.request.model, usage, priced, summary=False,
                    lost=(report.reasoning_removed, usage.dropped))
        self._baselines[job.key] = Baseline(
            money.client_prompt(usage, report.tokens_before, report.tokens_after),
            report.messages is None, usage.written > 0)
        self._baselines.move_to_end(job.key)
        if len(self._baselines) > _BASELINES:
            self._baselines.popitem(last=False)
        return priced

    def book_summary(self, job: Job, model: str, usage: UpstreamUsage) -> None:
        """Count one summary call (money spent; nothing the client would have spent)."""
        spent = money.cost(usage, self.prices(model, job.policy))
        self._count(job, model, usage, Money(spent, 0.0), summary=True)

    def _count(self, job: Job, model: str, usage: UpstreamUsage, priced: Money,
               summary: bool, lost: tuple[int, int] = (0, 0)) -> None:
        self.metrics.upstream_usage(model, usage.prompt, usage.cached, usage.written)
        self.metrics.money(model, priced.spent, priced.without)
        self.records.add_upstream_usage(
            job.principal.org, job.key, model, usage.prompt, usage.cached,
            written=usage.written, summary=summary, user=job.principal.user,
            spent=priced.spent, without=priced.without, lost=lost)
