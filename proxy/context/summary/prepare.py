"""Background preparation of summaries (SPEC section 5, ``compaction.prepare_ratio``).

When the transcript as sent crosses ``prepare_ratio`` × window (and stays under the trigger),
the request goes upstream at once and a task prepares the summary a compaction at this point
would make: the same plan as at the trigger (``prepare_ratio`` standing in for the trigger
ratio), the same summary call on the request's cached prefix. The request that crosses the
trigger applies it (``SummarySource``), or, while it is still being made and the request fits
the window without it, goes upstream uncompacted. Nothing here changes what a request sends.

One preparation per conversation at a time (in the process: one task per conversation; across
replicas: the lease of ``proxy.context.summary.prepared``), at most ``MAX_PREPARATIONS`` in the
process at once (beyond it a request starts none; the next one of the conversation tries again). A
failed preparation is logged and counted, and leaves everything as it was (fail-open). At
shutdown ``close`` cancels the tasks and waits for them: their leases are released, and a
summary not stored whole is not stored at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from proxy.context.accounting import overhead
from proxy.context.job import Job
from proxy.context.records.flights import Flights
from proxy.context.stages.plan import Plan, plan
from proxy.context.stages.shared import first_items, prefix_hash
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.compaction import Compacted
from proxy.context.summary.prepared import PreparedStore, PreparedSummary, lease_name, made_now
from proxy.metrics import Metrics
from proxy.policy.model import Policy

log = logging.getLogger("context_proxy.context")

MAX_PREPARATIONS = 8  # preparations running at once in one process

SummaryMaker = Callable[[Job, Plan], Awaitable[tuple[Compacted, str]]]
"""(job, plan) -> the summary a compaction of the plan makes and the model that wrote it;
raises ``SummaryFailed``, ``TimeoutError`` or ``ValueError`` when none was made."""


def preparing(policy: Policy) -> bool:
    """Whether the policy prepares summaries: a ``prepare_ratio`` under the trigger ratio."""
    cp = policy.compaction
    return cp.enabled and cp.prepare_ratio < cp.trigger_ratio


def at_prepare_point(job: Job) -> Plan:
    """The plan of the request as if the trigger were ``prepare_ratio`` (pure, blocking), made
    ahead (``plan_compaction``) and its keep window short of the growth the trigger leaves room
    for: the messages that arrive until the summary is applied stay verbatim after it (the
    newest tool group of the request that applies it among them), so the list it is applied to
    keeps about a keep window, as a compaction made at the trigger would. A full keep window on
    top, or this request's newest tool group kept as well, would leave the list that much
    longer until the next compaction, at every turn (``bench/compaction_latency.py``, 150 turns
    x 128k, 10 s summaries: 16-22k tokens after each compaction with the newest group kept,
    12-16k without it, 9-15k in the synchronous design)."""
    policy = job.scope.policy
    room = policy.compaction.trigger_ratio - policy.compaction.prepare_ratio
    cp = replace(policy.compaction, trigger_ratio=policy.compaction.prepare_ratio,
                 keep_ratio=max(0.0, policy.compaction.keep_ratio - room))
    scope = replace(job.scope, policy=replace(policy, compaction=cp))
    req = job.request
    pairs = job.known.pairs_for(job.scope.counter, req.messages, req.model)
    # Whether the compaction lasts is the trigger's question, asked when it is applied.
    return plan(req.messages, scope, job.prior, False, pairs, job.known.verified, lasting=False,
                ahead=True)


def ripe(job: Job, p: Plan) -> bool:
    """Whether a request still under the trigger applies the prepared summary now: the next
    turn, growing as this one did, would cross the trigger. Applied at the trigger instead, it
    would leave every message since the prepare point verbatim, the last turn's overshoot
    included, and the list after it longer than a compaction made at the trigger leaves (whose
    keep window is bounded): every later turn would pay for the difference until the next
    compaction. Unknown growth (no earlier request to compare with) waits for the trigger."""
    policy = job.policy
    if job.force or p.action != "forward" or not preparing(policy) or not job.known.unchanged:
        return False
    window = job.scope.compaction_window
    if p.tokens_after_mask <= policy.compaction.prepare_ratio * window:
        return False
    req = job.request  # this turn's new messages, counted once already (the counter's cache)
    growth = sum(first_items(job.scope.counter.token_pairs(req.messages[job.known.unchanged:],
                                                           req.model)))
    return p.tokens_after_mask + growth > policy.compaction.trigger_ratio * window


def matches(job: Job, prep: PreparedSummary) -> bool:
    """Whether ``prep`` is usable for the request: newer than the conversation's stored
    compaction, its prefix the request's own, and a message after it (a summary is planned
    ahead and may cover the whole list it was prepared on; the rewritten list must end with
    what the model acts on next). Blocking: hashes the prefix."""
    return prep.covered < len(job.request.messages) and covers(job, prep)


def covers(job: Job, prep: PreparedSummary) -> bool:
    """Whether ``prep`` is newer than the conversation's stored compaction and its prefix a
    prefix of the request (the request itself included). Blocking: hashes the prefix."""
    covered = job.prior.covered if job.prior is not None else 0
    messages = job.request.messages
    return covered < prep.covered <= len(messages) and \
        prefix_hash(messages, prep.covered) == prep.prefix_hash


class Preparer:
    def __init__(self, store: PreparedStore, flights: Flights, metrics: Metrics,
                 make: SummaryMaker, limit: int = MAX_PREPARATIONS) -> None:
        self.store = store
        self.flights = flights
        self.metrics = metrics
        self.make = make
        self.limit = limit
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def busy(self) -> bool:
        """Whether a preparation is running."""
        return bool(self._tasks)

    def running(self, conversation: str) -> asyncio.Task[None] | None:
        return self._tasks.get(conversation)

    def consider(self, job: Job, p: Plan) -> None:
        """After planning a request that goes upstream as planned: prepare its summary when
        the transcript as sent is past ``prepare_ratio`` × window."""
        cp = job.policy.compaction
        if p.action == "forward" and preparing(job.policy) and \
                p.tokens_after_mask > cp.prepare_ratio * job.scope.compaction_window:
            self.start(job, None)

    def start(self, job: Job, p: Plan | None) -> bool:
        """Prepare the summary of ``p`` (``None``: of the request at the prepare point) in the
        background, unless the conversation has a preparation running or the process is at
        its bound."""
        if job.key in self._tasks or len(self._tasks) >= self.limit:
            return False
        task = asyncio.get_running_loop().create_task(self._run(job, p),
                                                      name=f"prepare {job.conversation_id}")
        self._tasks[job.key] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.key, None))
        return True

    async def usable(self, job: Job) -> PreparedSummary | None:
        """The conversation's prepared summary when it is usable for ``job``."""
        prep = await self.store.load(job.key)
        if prep is None or not await job.bulk(matches, job, prep):
            return None
        return prep

    async def unused(self, prep: PreparedSummary) -> None:
        """Drop a prepared summary that will not be applied (counted ``unused``)."""
        if await self.store.discard(prep):
            self.metrics.prepared.labels("unused").inc()

    async def close(self) -> None:
        """Cancel the running preparations and wait for them (shutdown)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: Job, p: Plan | None) -> None:
        overhead.begin()  # its own clock: the task's time is not its request's overhead
        try:
            await self._prepare(job, p)
        except (SummaryFailed, TimeoutError, ValueError) as e:
            self.metrics.prepared.labels("failed").inc()
            log.warning("preparing a summary failed for a conversation of %s: %s",
                        job.principal.org, e)
        except Exception:  # fail-open: the request path never sees a preparation's error
            self.metrics.prepared.labels("failed").inc()
            log.exception("preparing a summary failed for a conversation of %s",
                          job.principal.org)

    async def _prepare(self, job: Job, p: Plan | None) -> None:
        if p is None:
            p = await job.offload(at_prepare_point, job)
        if p.action != "summarize":
            return
        claim = await self.store.claim(job.key)
        if not claim.holder:
            return  # another replica is preparing this conversation's summary
        async with self.flights.hold(lease_name(job.key)):
            if claim.newest_seq != (job.prior.seq if job.prior is not None else 0):
                return  # compacted since this request was read: its view is stale
            if claim.existing is not None and await job.bulk(covers, job, claim.existing):
                return  # prepared already, for a prefix of this request
            phash = await job.bulk(prefix_hash, job.request.messages, p.covered)
            done, model = await self.make(job, p)
            if not done.gain:
                self.metrics.prepared.labels("insufficient").inc()
                return
            tokens = job.scope.counter.text_tokens(done.summary, job.request.model)
            prep = made_now(job.key, phash, p.covered, p.preserved, done.summary, model,
                            tokens, done.truncated)
            if await self.store.put(job.principal.org, prep):
                self.metrics.prepared.labels("unused").inc()  # it replaced one never applied
