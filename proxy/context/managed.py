"""The managed path of ``POST /v1/chat/completions`` (SPEC sections 3–6), at the service edge.

``prepare`` resolves who asks, the conversation, the policy (corrected by the upstream's usage),
the window and the stored compaction, and decides once whether the request's blocking work runs
in a thread. ``manage`` runs the pure ``plan`` and then executes it: spills, one summary per
conversation and prefix shared by concurrent requests (single flight: in the process, and
across replicas through ``proxy.context.records.flights``), the divider, metrics,
and one frozen ``ContextReport``. ``record_usage`` feeds the upstream's count back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from proxy.auth import Principal
from proxy.context.accounting import overhead
from proxy.context.accounting.correction import UsageCorrection
from proxy.context.accounting.ledger import Ledger
from proxy.context.accounting.money import Money
from proxy.context.binding import Bindings, removed
from proxy.context.history import History
from proxy.context.identity import conversation_key, fingerprint_id, valid_public_id
from proxy.context.job import ChatRequest, Job
from proxy.context.offload import offload_for, run_inline, run_off_loop
from proxy.context.records.compactions import CompactionRecord, Records
from proxy.context.records.flights import Flights
from proxy.context.report import ContextReport, Outcome
from proxy.context.stages.plan import Plan, Prior, kept_tokens, plan, sent_before
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import prefix_hash
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.compaction import Compacted, compact
from proxy.context.summary.in_api import ApiSummarizerFactory
from proxy.context.summary.prepare import Preparer, preparing, ripe
from proxy.context.summary.prepared import PreparedStore
from proxy.context.summary.summarizer import Summarizer, SummarizerFactory
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.errors import bad_request
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.model import Policy
from proxy.store import StoreUnavailable
from proxy.upstream.usage import UpstreamUsage

log = logging.getLogger("context_proxy.context")

Flight = tuple[str, str]  # (conversation key, prefix hash)


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


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
        self._inflight: dict[Flight, asyncio.Future[CompactionRecord | None]] = {}
        self.flights = Flights(records)  # the same, across processes sharing the store
        self.preparer = Preparer(PreparedStore(records, self.flights.owner), self.flights,
                                 metrics, self.summarized)

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
                         self.bindings.binds(request.adapted, request.model, policy)), ratio,
                   self.records.latest(key), known, offload_for(new), offload_for(bulk),
                   force=manual, kind="manual" if manual else "auto", window_source=source)

    async def _window(self, model: str, policy: Policy) -> tuple[int | None, str]:
        """The model's window and its source; an unknown window is the ``fallback``."""
        window, source = await self.windows.resolve(model, policy)
        return window, source if window is not None else "fallback"

    # --- plan and execute -----------------------------------------------------------------------

    async def manage(self, job: Job, *, retried: str | None = None) -> ContextReport:
        """Plan and execute one request; a failed summary never raises (fail-open)."""
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
            report = await self._at_trigger(job, p, retried)
        else:
            ahead = retried is None and not job.scope.bound  # see _at_trigger
            early = await self._apply_prepared(job, p, retried) \
                if ahead and ripe(job, p) else None
            report = early or self._report(
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

    async def _at_trigger(self, job: Job, p: Plan, retried: str | None) -> ContextReport:
        """A request past the trigger: apply the prepared summary; else, while the request
        fits the window as it is, send it so and prepare one; else wait for the one being
        prepared, or compact inline (a manual compaction and an overflow retry always do).
        On a model that binds reasoning (``Scope.bound``) nothing is prepared: the turns that
        arrive while a summary is made would stay after it with reasoning bound to the old
        list."""
        if job.force or retried is not None or not preparing(job.policy) or job.scope.bound:
            return await self._waited(job, p, retried)
        applied = await self._apply_prepared(job, p, retried)
        if applied is not None:
            return applied
        if p.tokens_after_mask <= job.scope.compaction_window:
            self.preparer.start(job, p)
            return self._report(job, p, "reused" if p.view.prior else "none", retried)
        started = time.perf_counter()
        running = self.preparer.running(job.key)
        if running is not None:
            with overhead.excluded():  # waiting for the summary call being prepared
                await asyncio.wait([running], timeout=job.policy.compaction.summary_timeout_s)
            applied = await self._apply_prepared(job, p, retried)
            if applied is not None:
                return replace(applied, summary_wait_ms=_ms_since(started))
        return await self._waited(job, p, retried, started)

    async def _waited(self, job: Job, p: Plan, retried: str | None,
                      started: float | None = None) -> ContextReport:
        """Compact inline: the request waits for the summary (``X-Context-Summary-Wait-Ms``)."""
        started = time.perf_counter() if started is None else started
        report = await self._compact(job, p, retried)
        return replace(report, summary_wait_ms=_ms_since(started))

    async def _apply_prepared(self, job: Job, p: Plan, retried: str | None
                              ) -> ContextReport | None:
        """The report of ``p``'s request with the conversation's prepared summary applied as
        a reused one is (no wait), or None when there is none for it or the result would still
        be over the trigger (then it is dropped, counted unused)."""
        prep = await self.preparer.usable(job)
        if prep is None:
            return None
        shared = await job.offload(self._plan, job, prep, False)
        if shared.view.prior is not prep or shared.action != "forward":
            await self.preparer.unused(prep)
            return None
        try:
            record, made = await self.preparer.store.apply(
                job.principal.org, prep, job.reported(p.tokens_before),
                job.reported(shared.tokens_after_mask))
        except StoreUnavailable:  # not applied: the request goes on as if none were prepared
            return None
        self.history.verify(job.key, (prep.prefix_hash, prep.covered))
        if not made:  # another request (or replica) applied it first
            return self._report(job, shared, "reused", retried, before=p)
        self.metrics.prepared.labels("used").inc()
        self.metrics.summary_tokens.inc(prep.summary_tokens)
        self.metrics.prefix_rewrites.labels("compact").inc()
        return self._report(job, shared, "auto", retried, divider=record, before=p)

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

    def _report(self, job: Job, p: Plan, outcome: Outcome, retried: str | None, *,
                compacted: Compacted | None = None, divider: CompactionRecord | None = None,
                before: Plan | None = None) -> ContextReport:
        """The report of what is sent for ``p``; ``before``: the plan the conversation's
        previous request followed, when this one sends a list rewritten since (a summary)."""
        messages = compacted.messages if compacted is not None else \
            (p.mask.messages if p.changed else None)
        estimate = compacted.tokens_after if compacted is not None else p.tokens_after_mask
        kept = p.kept
        if before is not None:
            kept = self._kept_since(job, before, messages or p.mask.messages)
        return ContextReport(job.conversation_id, messages, job.reported(p.tokens_before),
                             job.reported(estimate), estimate,
                             job.scope.compaction_window, len(p.mask.masked), outcome, kept,
                             divider, retried, window_source=job.window_source)

    def _kept_since(self, job: Job, before: Plan, sent: list[dict[str, Any]]) -> int:
        """Tokens at the start of ``sent`` that ``before``'s previous request sent the same:
        the leading messages a summary left untouched (the same objects as before)."""
        old = before.mask.messages
        n = 0
        while n < min(before.previous, len(sent)) and sent[n] is old[n]:
            n += 1
        return kept_tokens(job.scope, before.mask.message_tokens, n) if before.previous else 0

    async def _compact(self, job: Job, p: Plan, retried: str | None) -> ContextReport:
        phash = await job.bulk(prefix_hash, job.request.messages, p.covered)
        flight = (job.key, phash)
        if flight in self._inflight:  # another request of this conversation is making it
            with overhead.excluded():  # waiting for its summary call
                record = await asyncio.shield(self._inflight[flight])
            return await self._shared(job, p, record, retried)
        future: asyncio.Future[CompactionRecord | None] = \
            asyncio.get_running_loop().create_future()
        self._inflight[flight] = future
        try:
            report, record = await self._lead(job, p, phash, retried)
            future.set_result(record)
            return report
        except BaseException:
            future.set_result(None)  # followers report "failed" and go on, like the leader
            raise
        finally:
            del self._inflight[flight]

    async def _lead(self, job: Job, p: Plan, phash: str, retried: str | None
                    ) -> tuple[ContextReport, CompactionRecord | None]:
        """This process's one request for the prefix: make the summary if no other process
        has made it or is making it; else reuse theirs (waiting for it, fail-open)."""
        claim = await self.flights.claim(job.key, phash, p.covered)
        record = claim.stored
        if claim.holder:
            async with self.flights.holding(job.key, phash, claim.leased):
                return await self._summarize(job, p, phash, retried)
        if record is None:
            with overhead.excluded():  # another process's summary call
                record = await self.flights.wait(job.key, phash, p.covered,
                                                 job.policy.compaction.summary_timeout_s)
            if record is None:
                log.warning("compaction failed for a conversation of %s: another process was "
                            "making its summary and none was stored in time", job.principal.org)
        return await self._shared(job, p, record, retried), record

    async def _shared(self, job: Job, p: Plan, record: CompactionRecord | None,
                      retried: str | None) -> ContextReport:
        """The report of a request whose summary another request made (None: it failed)."""
        if record is None:
            return self._report(job, p, "failed", retried)
        shared = await job.offload(self._plan, job, record, False)
        return self._report(job, shared, "reused", retried, before=p)

    async def summarized(self, job: Job, p: Plan) -> tuple[Compacted, str]:
        """The summary a compaction of ``p`` makes (on the request's cached prefix when the
        request's model summarizes) and the model that wrote it; its calls are counted.
        Raises ``SummaryFailed``, ``TimeoutError`` or ``ValueError`` when none was made."""
        summary_model = job.policy.compaction.summary_model or job.request.model
        summary_scope = Scope(job.scope.policy,
                              await self.windows.window(summary_model, job.policy),
                              self.counter, summary_model)
        started = time.perf_counter()
        try:
            assert p.compaction is not None
            riding = await job.offload(sent_before, p, job.scope)
            with overhead.excluded():  # the summary calls are the upstream's time
                # Off the loop whatever the request's size: the prompts count the transcript's
                # text uncached, with the summary model's tokenizer (loaded on its first use,
                # a second of CPU), tens of milliseconds that /healthz would wait behind.
                done = await compact(p.compaction, p.mask.messages, p.view.messages, job.scope,
                                     self.summarizer(job, summary_model), summary_scope,
                                     run_off_loop, riding)
        finally:
            self.metrics.summary_duration.observe(time.perf_counter() - started)
        for answer in done.answers:  # paid for, whether the summary is used or not
            self.ledger.book_summary(job, summary_model, answer.usage)
        return done, summary_model

    async def _summarize(self, job: Job, p: Plan, phash: str, retried: str | None
                         ) -> tuple[ContextReport, CompactionRecord | None]:
        try:
            done, summary_model = await self.summarized(job, p)
        except (SummaryFailed, TimeoutError, ValueError) as e:
            log.warning("compaction failed for a conversation of %s: %s", job.principal.org, e)
            return self._report(job, p, "failed", retried), None
        if not done.gain:
            return self._report(job, p, "insufficient", retried), None
        summary_tokens = self.counter.text_tokens(done.summary, job.request.model)
        self.metrics.summary_tokens.inc(summary_tokens)
        record = await self.records.add_compaction(
            job.principal.org, job.key, kind=job.kind, prefix_hash=phash,
            covered=p.covered, preserved=p.preserved, summary=done.summary,
            summary_model=summary_model, summary_tokens=summary_tokens,
            # The divider shows the figures the answer's X-Context-Tokens-* headers show.
            tokens_before=job.reported(p.tokens_before),
            tokens_after=job.reported(done.tokens_after), status=done.status,
            truncated=done.truncated, reasoning_removed=removed(job.request.adapted, p))
        self.history.verify(job.key, (phash, p.covered))
        outcome: Outcome = "insufficient" if done.status == "insufficient" else job.kind
        self.metrics.prefix_rewrites.labels("compact").inc()
        return self._report(job, p, outcome, retried, compacted=done, divider=record,
                            before=p), record

    def summarizer(self, job: Job, model: str) -> Summarizer:
        """The summary calls of ``job``'s compactions, to ``model``: in the request's own API
        when it came through an adapter, else chat completions."""
        timeout = job.policy.compaction.summary_timeout_s
        adapted = job.request.adapted
        if adapted is not None and self.api_summarizers is not None:
            return self.api_summarizers(job.principal, model, timeout, adapted)
        return self.summarizers(job.principal, model, timeout)

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

