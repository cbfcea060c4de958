"""The live context pipeline of ``POST /v1/chat/completions`` (SPEC sections 3–6).

For each request: resolve policy and window; apply the conversation's stored compaction when its
covered prefix matches (reuse, no LLM call); mask; compact when the trigger is crossed (one
summary call per conversation and prefix, shared by concurrent requests); report what was done.
The stages themselves are pure (``proxy.context.stages``); this module does the I/O around them: the
store, the summary call and the metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.auth import Principal
from proxy.context.identity import conversation_key, fingerprint_id, prefix_hash, valid_public_id
from proxy.context.offload import run_off_loop
from proxy.context.records import CompactionRecord, Records
from proxy.context.stages.compact import CompactionResult, compact, summary_message
from proxy.context.stages.plan import RewritePlan, plan_rewrite_sync
from proxy.context.stages.summary import Summarizer, SummaryFailed
from proxy.context.summarizer import make_summarizer
from proxy.context.tokens import TokenCounter, fingerprint
from proxy.context.window import WindowResolver, compaction_window
from proxy.errors import bad_request
from proxy.metrics import Metrics
from proxy.policy.model import Policy

log = logging.getLogger("context_proxy.context")

_RATIO_BOUNDS = (0.5, 2.0)  # how far the upstream's own count may correct our estimate


@dataclass
class Managed:
    """What the pipeline decided for one request."""

    conversation_id: str
    key: str
    messages: list[dict[str, Any]] | None  # None: forward the client's messages untouched
    tokens_before: int
    tokens_after: int
    estimate_after: int  # uncorrected estimate of what is sent, for the usage correction
    window: int
    masked: int
    outcome: str  # none | auto | manual | reused | failed | insufficient
    divider: CompactionRecord | None = None
    retried: str | None = None

    def response_headers(self) -> dict[str, str]:
        h = {"X-Conversation-Id": self.conversation_id,
             "X-Context-Tokens-Before": str(self.tokens_before),
             "X-Context-Tokens-After": str(self.tokens_after),
             "X-Context-Window": str(self.window),
             "X-Context-Masked": str(self.masked),
             "X-Context-Compaction": self.outcome}
        if self.divider is not None:
            h["X-Context-Divider-Id"] = self.divider.id
        if self.retried:
            h["X-Context-Retried"] = self.retried
        return h

    def sse_comment(self) -> bytes:
        """The SSE comment line streamed first when a compaction ran (parsers ignore it)."""
        if self.divider is None or self.outcome not in ("auto", "manual"):
            return b""
        return (f": context-compacted kind={self.outcome} divider={self.divider.id} "
                f"tokens_before={self.tokens_before} tokens_after={self.tokens_after}\n\n"
                ).encode()


@dataclass
class _View:
    """The client's messages with the stored compaction applied (or not)."""

    messages: list[dict[str, Any]]
    origin: list[int]  # client index of each message; -1 for the summary message
    record: CompactionRecord | None


def _prefix_hash(messages: Sequence[Mapping[str, Any]], n: int) -> str:
    return prefix_hash([fingerprint(m) for m in messages[:n]], n)


class ContextService:
    def __init__(self, *, counter: TokenCounter, windows: WindowResolver, records: Records,
                 metrics: Metrics, upstream_url: str) -> None:
        self.counter = counter
        self.windows = windows
        self.records = records
        self.metrics = metrics
        self.upstream_url = upstream_url
        self._inflight: dict[tuple[str, str], asyncio.Future[CompactionRecord | None]] = {}
        self._scaled: dict[tuple[int, float], tuple[Policy, Policy]] = {}

    # --- identity and policy --------------------------------------------------------------------

    def identify(self, principal: Principal, header: str | None,
                 messages: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
        if header is not None:
            if not valid_public_id(header):
                raise bad_request("'X-Conversation-Id' must be 1–256 printable characters.",
                                  param="X-Conversation-Id")
            public = header
        else:
            public = fingerprint_id(principal.org, messages)
        return public, conversation_key(principal.org, public)

    def _corrected(self, key: str, policy: Policy) -> tuple[Policy, float]:
        """The policy with triggers scaled by what the upstream's usage said of our estimates."""
        usage = self.records.usage(key)
        if usage is None:
            return policy, 1.0
        ratio = min(max(usage.prompt_tokens / usage.estimate, _RATIO_BOUNDS[0]), _RATIO_BOUNDS[1])
        ratio = round(ratio, 2)  # steps of 1%: finer is noise, and it keeps the memo small
        if ratio == 1.0:
            return policy, 1.0
        memo = (id(policy), ratio)
        hit = self._scaled.get(memo)
        if hit is None or hit[0] is not policy:
            m, c = policy.masking, policy.compaction
            scaled = replace(
                policy,
                masking=replace(m, trigger_ratio=min(1.0, m.trigger_ratio / ratio)),
                compaction=replace(c, trigger_ratio=min(1.0, c.trigger_ratio / ratio),
                                   keep_ratio=min(1.0, c.keep_ratio / ratio)))
            if len(self._scaled) > 4096:
                self._scaled.clear()
            hit = self._scaled[memo] = (policy, scaled)
        return hit[1], ratio

    # --- the pipeline ---------------------------------------------------------------------------

    async def manage(self, principal: Principal, policy: Policy, body: Mapping[str, Any],
                     conversation: tuple[str, str], *, force: bool = False,
                     kind: str = "auto", retried: str | None = None,
                     size: int | None = None) -> Managed:
        """Run the pipeline for one request; never raises for a failed summary (fail-open).

        ``size`` (the request body's length, when known) decides cheaply whether the counting
        goes to a worker thread."""
        public, key = conversation
        model: str = body["model"]
        messages: list[dict[str, Any]] = body["messages"]
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        window = await self.windows.window(model, policy)
        cpolicy, ratio = self._corrected(key, policy)
        record = self.records.latest(key)
        args = (messages, cpolicy, window, model, tools, force, record)
        if self.counter.needs_offload(messages, model, size):
            view, plan, before = await run_off_loop(self._plan, *args)
        else:
            view, plan, before = self._plan(*args)
        managed = Managed(public, key, None, before, plan.tokens_after_mask,
                          plan.tokens_after_mask, compaction_window(window, policy),
                          len(plan.mask.masked), "reused" if view.record else "none",
                          retried=retried)
        await self.records.ensure(principal.org, key)
        if plan.mask.masked:
            await self.records.add_spills(principal.org, key, plan.mask.masked,
                                          policy.masking.spill_retention)
        result = await self._maybe_compact(principal, cpolicy, body, view, plan, managed,
                                           window, force, kind)
        if isinstance(result, CompactionRecord):  # another request made it: apply it here
            view = self._apply_record(messages, result, cpolicy)
            plan = await run_off_loop(plan_rewrite_sync, view.messages, cpolicy, window,
                                      self.counter, model, tools)
            result = None
        rewritten = result is not None and result.rewritten
        if view.record or plan.mask.masked or rewritten:
            managed.messages = result.messages if result is not None and rewritten \
                else plan.mask.messages
        managed.masked = len(plan.mask.masked)
        managed.estimate_after = result.tokens_after if result is not None and rewritten \
            else plan.tokens_after_mask
        managed.tokens_before = round(before * ratio)
        managed.tokens_after = round(managed.estimate_after * ratio)
        self._observe(principal, model, managed, plan)
        return managed

    def _plan(self, messages: list[dict[str, Any]], policy: Policy, window: int | None,
              model: str, tools: list[Any] | None, force: bool,
              record: CompactionRecord | None) -> tuple[_View, RewritePlan, int]:
        """The blocking part: fingerprints, reuse, masking and the compaction plan."""
        view = self._apply_record(messages, record, policy)
        plan = plan_rewrite_sync(view.messages, policy, window, self.counter, model, tools,
                                 force)
        before = self.counter.count_messages(messages, model, tools) if view.record \
            else plan.tokens_before
        return view, plan, before

    def _apply_record(self, messages: list[dict[str, Any]], record: CompactionRecord | None,
                      policy: Policy) -> _View:
        n = len(messages)
        if record is not None and record.covered <= n:
            fps = [fingerprint(m) for m in messages[:record.covered]]
            if prefix_hash(fps, record.covered) == record.prefix_hash:
                summary = summary_message(record.summary, policy)
                return _View([*(messages[i] for i in record.preserved), summary,
                              *messages[record.covered:]],
                             [*record.preserved, -1, *range(record.covered, n)], record)
        return _View(messages, list(range(n)), None)

    async def _maybe_compact(self, principal: Principal, policy: Policy,
                             body: Mapping[str, Any], view: _View, plan: RewritePlan,
                             managed: Managed, window: int | None, force: bool, kind: str
                             ) -> CompactionResult | CompactionRecord | None:
        """Compact when planned; a ``CompactionRecord`` means a concurrent request made it."""
        cplan = plan.compaction
        if cplan is None:
            return None
        summary_pos = len(view.record.preserved) if view.record else -1
        if not cplan.summarizable or cplan.cut <= summary_pos:
            managed.outcome = "insufficient"
            return None
        last = view.record
        if not force and last is not None and last.status == "insufficient" and \
                plan.tokens_after_mask < last.tokens_after + cplan.keep_budget:
            # No loops: the last summary could not get under the trigger; wait for a keep
            # window's worth of new messages before paying for another.
            managed.outcome = "insufficient"
            return None
        messages: list[dict[str, Any]] = body["messages"]
        covered = view.origin[cplan.cut] if cplan.cut < len(view.origin) else len(messages)
        preserved = tuple(view.origin[i] for i in cplan.preserved if view.origin[i] >= 0)
        phash = await run_off_loop(_prefix_hash, messages, covered)  # megabytes to hash
        flight = (managed.key, phash)
        if flight in self._inflight:
            return await self._follow(flight, managed)
        future: asyncio.Future[CompactionRecord | None] = \
            asyncio.get_running_loop().create_future()
        self._inflight[flight] = future
        try:
            result, record = await self._summarize(principal, policy, body, view, plan, managed,
                                                   window, kind, covered, preserved, phash)
            future.set_result(record)
            return result
        except BaseException:
            future.set_result(None)  # followers report "failed" and go on, like the leader
            raise
        finally:
            del self._inflight[flight]

    async def _follow(self, flight: tuple[str, str], managed: Managed
                      ) -> CompactionRecord | None:
        """Wait for the compaction another request of this conversation is making; share it."""
        record = await asyncio.shield(self._inflight[flight])
        managed.outcome = "failed" if record is None else "reused"
        return record

    async def _summarize(self, principal: Principal, policy: Policy, body: Mapping[str, Any],
                         view: _View, plan: RewritePlan, managed: Managed, window: int | None,
                         kind: str, covered: int, preserved: tuple[int, ...], phash: str
                         ) -> tuple[CompactionResult | None, CompactionRecord | None]:
        model: str = body["model"]
        cp = policy.compaction
        summary_model = cp.summary_model or model
        summarize = self._summarizer(principal, summary_model, cp.summary_timeout_s)
        summary_window = await self.windows.window(summary_model, policy)
        started = time.perf_counter()
        try:
            result = await compact(plan.mask.messages, view.messages, policy, window,
                                   self.counter, model, summarize, summary_window,
                                   tools=body.get("tools"), plan=plan.compaction,
                                   summary_model=summary_model)
        except (SummaryFailed, TimeoutError, ValueError) as e:
            log.warning("compaction failed for a conversation of %s: %s", principal.org, e)
            self.metrics.summary_duration.observe(time.perf_counter() - started)
            managed.outcome = "failed"
            return None, None
        self.metrics.summary_duration.observe(time.perf_counter() - started)
        if not result.rewritten or result.summary is None:
            managed.outcome = "insufficient"
            return result, None
        summary_tokens = self.counter.text_tokens(result.summary, model)
        self.metrics.summary_tokens.inc(summary_tokens)
        record = await self.records.add_compaction(
            principal.org, managed.key, kind=kind, prefix_hash=phash, covered=covered,
            preserved=preserved, summary=result.summary, summary_model=summary_model,
            summary_tokens=summary_tokens, tokens_before=managed.tokens_before,
            tokens_after=result.tokens_after,
            status="insufficient" if result.status == "insufficient" else "compacted")
        managed.divider = record
        managed.outcome = "insufficient" if result.status == "insufficient" else kind
        return result, record

    def _summarizer(self, principal: Principal, model: str, timeout_s: float) -> Summarizer:
        return make_summarizer(self.upstream_url, principal.upstream_key, model, principal.org,
                               timeout_s)

    def _observe(self, principal: Principal, model: str, managed: Managed,
                 plan: RewritePlan) -> None:
        m = self.metrics
        label = m.model_label(model)
        m.tokens_received.labels(principal.org, label).inc(managed.tokens_before)
        m.tokens_sent.labels(principal.org, label).inc(managed.tokens_after)
        if plan.mask.masked:
            m.masked_results.labels(principal.org).inc(len(plan.mask.masked))
            m.masked_tokens.labels(principal.org).inc(plan.mask.tokens_freed)
        if managed.outcome != "none":
            m.compactions.labels(managed.outcome).inc()

    async def record_usage(self, principal: Principal, managed: Managed,
                           prompt_tokens: int) -> None:
        """Correct later estimates of this conversation with the upstream's own count."""
        if prompt_tokens <= 0 or managed.estimate_after <= 0:
            return
        old = self.records.usage(managed.key)
        if old is not None and abs(prompt_tokens / managed.estimate_after -
                                   old.prompt_tokens / old.estimate) < 0.01:
            return  # unchanged: spare the disk a write per turn
        await self.records.record_usage(principal.org, managed.key, prompt_tokens,
                                        managed.estimate_after)
