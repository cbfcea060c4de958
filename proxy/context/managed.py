"""The managed path of ``POST /v1/chat/completions`` (SPEC sections 3–6), at the service edge.

``prepare`` resolves who asks, the conversation, the policy (corrected by the upstream's usage),
the window and the stored compaction, and decides once whether the request's blocking work runs
in a thread. ``manage`` runs the pure ``plan`` and then executes it: spills, the summary of a
request past the trigger (``SummarySource`` in ``proxy.context.summary.source``: prepared, or
made once per conversation and prefix), metrics, and one frozen ``ContextReport``.
``record_usage`` feeds the upstream's count back.
"""

from __future__ import annotations

from dataclasses import replace

from proxy.auth import Principal
from proxy.context.accounting.correction import UsageCorrection
from proxy.context.accounting.ledger import Ledger
from proxy.context.accounting.money import Money
from proxy.context.binding import Bindings, removed
from proxy.context.history import History
from proxy.context.identity import conversation_key, fingerprint_id, valid_public_id
from proxy.context.job import ChatRequest, Job
from proxy.context.offload import offload_for, run_inline
from proxy.context.records.compactions import Records
from proxy.context.report import ContextReport
from proxy.context.shadow import MODE, Shadow
from proxy.context.stages.plan import Plan, Prior, kept_tokens, plan, previous_point
from proxy.context.stages.scope import Scope
from proxy.context.summary.compaction import Compacted
from proxy.context.summary.in_api import ApiSummarizerFactory
from proxy.context.summary.prepare import ripe
from proxy.context.summary.source import SummarySource, report_of
from proxy.context.summary.summarizer import Summarizer, SummarizerFactory
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.errors import bad_request
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.model import Policy
from proxy.upstream.usage import UpstreamUsage


class ContextService:
    def __init__(self, *, counter: TokenCounter, windows: WindowResolver, records: Records,
                 metrics: Metrics, policies: PolicyService,
                 summarizers: SummarizerFactory,
                 api_summarizers: ApiSummarizerFactory | None = None) -> None:
        self.counter = counter
        self.windows = windows
        self.records = records
        self.metrics = metrics
        self.policies = policies
        self.summarizers = summarizers
        self.api_summarizers = api_summarizers
        self.usage = UsageCorrection(records)
        self.ledger = Ledger(records, metrics)
        self.history, self.bindings = History(counter), Bindings()
        self.summaries = SummarySource(
            counter=counter, windows=windows, records=records, metrics=metrics,
            ledger=self.ledger, history=self.history, replan=self._plan,
            summarizers=summarizers, api_summarizers=api_summarizers)
        self.flights = self.summaries.flights
        self.shadow = Shadow(self.ledger)
        self.preparer = self.summaries.preparer

    # --- prepare --------------------------------------------------------------------------------

    def identify(self, principal: Principal, header: str | None,
                 request: ChatRequest) -> tuple[str, str]:
        """(public conversation id, stored key): the header's id, else a fingerprint."""
        if header is not None:
            if not valid_public_id(header):
                raise bad_request("'X-Conversation-Id' must be 1–256 printable characters.",
                                  param="X-Conversation-Id")
            public = header
        else:
            public = fingerprint_id(principal.namespace, request.messages)
        return public, conversation_key(principal.namespace, public)

    async def prepare(self, principal: Principal, request: ChatRequest, header: str | None, *,
                      manual: bool = False, conversation: tuple[str, str] | None = None
                      ) -> Job:
        """Everything about the request that a retry keeps. ``conversation`` (public id, key)
        skips identification when the caller already knows it."""
        public, key = conversation or self.identify(principal, header, request)
        if not self.ledger.is_ready:
            await self.ledger.ready()
        if not self.records.is_fresh(key):
            await self.records.refresh(key)  # another replica may have compacted it since
        policy = self.policies.resolve(principal.org, principal.user)
        window, source = await self._window(request.model, policy)
        corrected, ratio = self.usage.corrected(key, policy)
        known = self.history.recall(key, request.messages, request.model, request.repeats,
                                    request.shared)
        # Comparing, planning and masking hold the GIL: a thread only pays when tiktoken has
        # much new text to encode (it releases the GIL) or hashlib a large prefix.
        bulk = len(request.raw) > self.counter.offload_chars
        # A body under the threshold holds less new text than that: no need to measure it.
        new = self.counter.needs_offload(request.messages[known.unchanged:], request.model,
                                         None if bulk else 0)
        return Job(principal, request, public, key, policy,
                   Scope(corrected, window, self.counter, request.model, request.tools,
                         self.bindings.binds(request.adapted, request.model, policy),
                         self.ledger.step_prices(request.model, policy)), ratio,
                   self.records.latest(key), known, offload_for(new), offload_for(bulk),
                   force=manual, kind="manual" if manual else "auto", window_source=source)

    async def _window(self, model: str, policy: Policy) -> tuple[int | None, str]:
        """The model's window and its source; an unknown window is the ``fallback``."""
        window, source = await self.windows.resolve(model, policy)
        return window, source if window is not None else "fallback"

    # --- plan and execute -----------------------------------------------------------------------

    async def manage(self, job: Job, *, retried: str | None = None) -> ContextReport:
        """Plan and execute one request; a failed summary never raises (fail-open). In shadow
        mode nothing is executed (``proxy.context.shadow``)."""
        if job.policy.mode == MODE:
            return await self._shadowed(job, retried)
        # (most requests plan inline: called directly, without a coroutine around it)
        p = self._plan(job, job.prior) if job.offload is run_inline else \
            await job.offload(self._plan, job, job.prior)
        if not self.records.is_known(job.key):
            await self.records.ensure(job.principal.org, job.key)
        if p.mask.masked or p.mask.inputs:  # cleared call arguments are spills like outputs
            await self.records.add_spills(job.principal.org, job.key,
                                          [*p.mask.masked, *p.mask.inputs],
                                          job.policy.masking.spill_retention)
        if p.action == "summarize":
            report = await self.summaries.at_trigger(job, p, retried)
        else:
            ahead = retried is None and not job.scope.bound  # see SummarySource.at_trigger
            early = await self.summaries.apply_prepared(job, p, retried) \
                if ahead and ripe(job, p) else None
            report = early or report_of(
                job, p, "insufficient" if p.action == "insufficient"
                else ("reused" if p.view.prior else "none"), retried)
            if early is None and not job.force and ahead:
                self.preparer.consider(job, p)
        if job.scope.bound and report.outcome in ("auto", "manual"):
            report = replace(report, reasoning_removed=removed(job.request.adapted, p))
        elif job.scope.bound and report.masked:  # masking stepped: compaction could not
            report = replace(report, drop_changed=True)
        self._observe(job, report, p)
        return report

    async def _shadowed(self, job: Job, retried: str | None) -> ContextReport:
        """The report of a request in shadow mode: the client's exact bytes go upstream (no
        spill, no summary call, no divider), with what managed mode would have done."""
        async def replan(j: Job, prior: Prior | None) -> Plan:
            return self._plan(j, prior) if j.offload is run_inline else \
                await j.offload(self._plan, j, prior)

        p, figures = await self.shadow.figures(job, replan)
        req = job.request
        tokens = [t for t, _ in job.known.pairs_for(self.counter, req.messages, req.model)]
        kept = kept_tokens(job.scope, tokens, previous_point(req.messages))
        report = ContextReport(
            job.conversation_id, None, job.reported(p.tokens_before),
            job.reported(p.tokens_before), p.tokens_before, job.scope.compaction_window, 0,
            "none", kept, retried=retried, window_source=job.window_source, shadow=figures)
        org, before = job.principal.org, report.tokens_before
        self.metrics.tokens(org, req.model, before, before)
        self.metrics.shadowed(org, req.model, figures)
        self.records.hourly.turn(org, job.principal.user, job.key, job.conversation_id,
                                 before, before, "none")
        self.records.hourly.shadowed(org, job.principal.user, figures.saved_tokens,
                                     figures.saved_usd)
        return report

    def _plan(self, job: Job, prior: Prior | None, force: bool | None = None) -> Plan:
        """The pure plan, from the conversation's last request where the messages repeat it
        (blocking: runs where ``job.offload`` says)."""
        req = job.request
        pairs = job.known.pairs_for(self.counter, req.messages, req.model)
        p = plan(req.messages, job.scope, prior, job.force if force is None else force, pairs,
                 job.known.verified)
        verified = (p.view.prior.prefix_hash, p.view.prior.covered) if p.view.prior else None
        self.history.remember(job.key, req.messages, req.model, pairs, verified, len(req.raw))
        return p

    async def retry_overflow(self, job: Job, stated_limit: int | None) -> ContextReport:
        """The reactive safety net: the upstream refused the request as too long; learn the
        limit it stated, compact regardless of the trigger and plan once more (never again)."""
        if stated_limit is not None:
            await self.windows.learn_shared(job.request.model, stated_limit)
        window, source = await self._window(job.request.model, job.policy)
        return await self.manage(job.forced(window, source), retried="context_length_exceeded")

    async def summarized(self, job: Job, p: Plan) -> tuple[Compacted, str]:
        """The summary a compaction of ``p`` makes and its model (``SummarySource``)."""
        return await self.summaries.summarized(job, p)

    def summarizer(self, job: Job, model: str) -> Summarizer:
        """The summary calls of ``job``'s compactions, to ``model`` (``SummarySource``)."""
        return self.summaries.summarizer(job, model)

    def _observe(self, job: Job, report: ContextReport, p: Plan) -> None:
        m = self.metrics
        org = job.principal.org
        m.tokens(org, job.request.model, report.tokens_before, report.tokens_after)
        self.records.hourly.turn(org, job.principal.user, job.key, job.conversation_id,
                                 report.tokens_before, report.tokens_after, report.outcome)
        if p.mask.masked:
            m.masked_results.labels(org).inc(len(p.mask.masked))
        if p.mask.masked or p.mask.inputs:
            m.masked_tokens.labels(org).inc(p.mask.tokens_freed)
        # ``insufficient`` counts compactions: a summary made that could not get the list under
        # the trigger, not each later request that waits (no loops) with the same header.
        if report.outcome != "none" and (report.outcome != "insufficient"
                                         or p.action == "summarize"):
            m.compactions.labels(report.outcome).inc()
        if p.rewrote:
            m.prefix_rewrites.labels("mask").inc()
        if report.reasoning_removed:
            m.reasoning(job.request.model, "compaction", report.reasoning_removed)

    # --- after the answer -----------------------------------------------------------------------

    async def record_usage(self, job: Job, report: ContextReport, usage: UpstreamUsage,
                           priced: Money | None = None) -> None:
        """What the upstream reported for the request: its count corrects later estimates of
        the conversation; its cache reads and writes and its money (``priced``, when the
        caller priced it already) are counted per conversation and model."""
        if usage.prompt <= 0:
            return
        if usage.dropped:  # the provider binds this model's reasoning, whatever the list says
            self.bindings.learn(job.request.model)
            self.metrics.reasoning(job.request.model, "provider", usage.dropped)
        self.ledger.book(job, report, usage, priced)
        if self.usage.changed(job.key, usage.prompt, report.estimate_after):
            await self.usage.record(job.principal.org, job.key, usage.prompt,
                                    report.estimate_after)

