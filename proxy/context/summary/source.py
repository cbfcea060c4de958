"""Where the summary of a request past the trigger comes from (``SummarySource``).

The contract: ``at_trigger`` takes a request whose plan says ``summarize`` and returns the one
frozen ``ContextReport`` of what is sent, from the first of these that applies:

1. the conversation's prepared summary (``proxy.context.summary.prepare``), applied without
   waiting, as a stored one is reused;
2. none yet: while the request fits the window as it is, it is sent so and a summary is
   prepared for a later request;
3. the summary being prepared, waited for (up to ``compaction.summary_timeout_s``);
4. one made inline, the request waiting for it (``summary_wait_ms``). One summary per
   conversation and prefix: concurrent requests of the process share the leader's record
   (a leader that made none, or raised, leaves its followers a ``None`` record: they report
   ``failed``); across processes ``Flights`` elects one maker and the others wait for the
   record it stores.

A manual compaction, an overflow retry and a model that binds reasoning (``Scope.bound``)
skip 1–3. A failed summary never raises (fail-open): the outcome is ``failed`` and the
request goes on as it came. ``apply_prepared`` is step 1 alone, for a request under the
trigger whose prepared summary is ripe; ``summarized`` makes one summary (the preparer's
and the inline maker's); ``summarizer`` the summary calls of a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from proxy.context.accounting import overhead
from proxy.context.accounting.ledger import Ledger
from proxy.context.binding import removed
from proxy.context.history import History
from proxy.context.job import Job
from proxy.context.offload import run_off_loop
from proxy.context.records.compactions import CompactionRecord, Records
from proxy.context.records.flights import Flights
from proxy.context.report import ContextReport, Outcome
from proxy.context.stages.covered import Covered, covered
from proxy.context.stages.plan import Plan, Prior, kept_tokens, sent_before
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import prefix_hash
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.compaction import Compacted, compact
from proxy.context.summary.in_api import ApiSummarizerFactory
from proxy.context.summary.prepare import Preparer, preparing
from proxy.context.summary.prepared import PreparedStore
from proxy.context.summary.summarizer import Summarizer, SummarizerFactory
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.metrics import Metrics
from proxy.store import StoreUnavailable

log = logging.getLogger("context_proxy.context")

Flight = tuple[str, str]  # (conversation key, prefix hash)
Replan = Callable[[Job, Prior | None, bool], Plan]  # the service's plan, from a given prior


def ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def report_of(job: Job, p: Plan, outcome: Outcome, retried: str | None, *,
              compacted: Compacted | None = None, divider: CompactionRecord | None = None,
              before: Plan | None = None) -> ContextReport:
    """The report of what is sent for ``p``; ``before``: the plan the conversation's
    previous request followed, when this one sends a list rewritten since (a summary)."""
    messages = compacted.messages if compacted is not None else \
        (p.mask.messages if p.changed else None)
    estimate = compacted.tokens_after if compacted is not None else p.tokens_after_mask
    kept = p.kept
    if before is not None:
        kept = kept_since(job, before, messages or p.mask.messages)
    return ContextReport(job.conversation_id, messages, job.reported(p.tokens_before),
                         job.reported(estimate), estimate,
                         job.scope.compaction_window, len(p.mask.masked), outcome, kept,
                         divider, retried, window_source=job.window_source)


def kept_since(job: Job, before: Plan, sent: list[dict[str, Any]]) -> int:
    """Tokens at the start of ``sent`` that ``before``'s previous request sent the same:
    the leading messages a summary left untouched (the same objects as before)."""
    old = before.mask.messages
    n = 0
    while n < min(before.previous, len(sent)) and sent[n] is old[n]:
        n += 1
    return kept_tokens(job.scope, before.mask.message_tokens, n) if before.previous else 0


class SummarySource:
    """The summary of a request past the trigger: prepared, waited for, or made (see the
    module's docstring for the order and the single flight)."""

    def __init__(self, *, counter: TokenCounter, windows: WindowResolver, records: Records,
                 metrics: Metrics, ledger: Ledger, history: History, replan: Replan,
                 summarizers: SummarizerFactory,
                 api_summarizers: ApiSummarizerFactory | None = None) -> None:
        self.counter = counter
        self.windows = windows
        self.records = records
        self.metrics = metrics
        self.ledger = ledger
        self.history = history
        self.replan = replan
        self.summarizers = summarizers
        self.api_summarizers = api_summarizers
        self._inflight: dict[Flight, asyncio.Future[CompactionRecord | None]] = {}
        self.flights = Flights(records)  # the same, across processes sharing the store
        self.preparer = Preparer(PreparedStore(records, self.flights.owner), self.flights,
                                 metrics, self.summarized)

    async def at_trigger(self, job: Job, p: Plan, retried: str | None) -> ContextReport:
        """A request past the trigger: apply the prepared summary; else, while the request
        fits the window as it is, send it so and prepare one; else wait for the one being
        prepared, or compact inline (a manual compaction and an overflow retry always do).
        On a model that binds reasoning (``Scope.bound``) nothing is prepared: the turns that
        arrive while a summary is made would stay after it with reasoning bound to the old
        list."""
        if job.force or retried is not None or not preparing(job.policy) or job.scope.bound:
            return await self._waited(job, p, retried)
        applied = await self.apply_prepared(job, p, retried)
        if applied is not None:
            return applied
        if p.tokens_after_mask <= job.scope.compaction_window:
            self.preparer.start(job, p)
            return report_of(job, p, "reused" if p.view.prior else "none", retried)
        started = time.perf_counter()
        running = self.preparer.running(job.key)
        if running is not None:
            with overhead.excluded():  # waiting for the summary call being prepared
                await asyncio.wait([running], timeout=job.policy.compaction.summary_timeout_s)
            applied = await self.apply_prepared(job, p, retried)
            if applied is not None:
                return replace(applied, summary_wait_ms=ms_since(started))
        return await self._waited(job, p, retried, started)

    async def _waited(self, job: Job, p: Plan, retried: str | None,
                      started: float | None = None) -> ContextReport:
        """Compact inline: the request waits for the summary (``X-Context-Summary-Wait-Ms``)."""
        started = time.perf_counter() if started is None else started
        report = await self._compact(job, p, retried)
        return replace(report, summary_wait_ms=ms_since(started))

    async def apply_prepared(self, job: Job, p: Plan, retried: str | None
                             ) -> ContextReport | None:
        """The report of ``p``'s request with the conversation's prepared summary applied as
        a reused one is (no wait), or None when there is none for it or the result would still
        be over the trigger (then it is dropped, counted unused)."""
        prep = await self.preparer.usable(job)
        if prep is None:
            return None
        shared = await job.offload(self.replan, job, prep, False)
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
            return report_of(job, shared, "reused", retried, before=p)
        self.metrics.prepared.labels("used").inc()
        self.metrics.summary_tokens.inc(prep.summary_tokens)
        self.metrics.prefix_rewrites.labels("compact").inc()
        return report_of(job, shared, "auto", retried, divider=record, before=p)

    async def _compact(self, job: Job, p: Plan, retried: str | None) -> ContextReport:
        # Not ``proxy.context.once.Once``: followers need the leader's record, and a leader
        # that raised leaves them ``failed`` instead of making the summary again.
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
            return report_of(job, p, "failed", retried)
        shared = await job.offload(self.replan, job, record, False)
        return report_of(job, shared, "reused", retried, before=p)

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
            return report_of(job, p, "failed", retried), None
        if not done.gain:
            return report_of(job, p, "insufficient", retried), None
        summary_tokens = self.counter.text_tokens(done.summary, job.request.model)
        self.metrics.summary_tokens.inc(summary_tokens)
        took = await self._covered(job, p)
        record = await self.records.add_compaction(
            job.principal.org, job.key, kind=job.kind, prefix_hash=phash,
            covered=p.covered, preserved=p.preserved, summary=done.summary,
            summary_model=summary_model, summary_tokens=summary_tokens,
            # The divider shows the figures the answer's X-Context-Tokens-* headers show.
            tokens_before=job.reported(p.tokens_before),
            tokens_after=job.reported(done.tokens_after), status=done.status,
            truncated=done.truncated, reasoning_removed=removed(job.request.adapted, p),
            turns=tuple(took.turns()), outputs=tuple(took.listed()))
        self.history.verify(job.key, (phash, p.covered))
        outcome: Outcome = "insufficient" if done.status == "insufficient" else job.kind
        self.metrics.prefix_rewrites.labels("compact").inc()
        return report_of(job, p, outcome, retried, compacted=done, divider=record,
                         before=p), record

    async def _covered(self, job: Job, p: Plan) -> Covered:
        """What ``p``'s summary covers; the tool outputs it removes are kept as spills, as
        masking keeps the ones it clears (the same ids for the same outputs)."""
        assert p.compaction is not None
        took = await job.bulk(covered, p.view.messages, p.view.origin, p.compaction.summarize,
                              self.counter, job.request.model)
        if took.outputs:
            await self.records.add_spills(job.principal.org, job.key, list(took.outputs),
                                          job.policy.masking.spill_retention)
        return took

    def summarizer(self, job: Job, model: str) -> Summarizer:
        """The summary calls of ``job``'s compactions, to ``model``: in the request's own API
        when it came through an adapter, else chat completions."""
        timeout = job.policy.compaction.summary_timeout_s
        adapted = job.request.adapted
        if adapted is not None and self.api_summarizers is not None:
            return self.api_summarizers(job.principal, model, timeout, adapted)
        return self.summarizers(job.principal, model, timeout)
