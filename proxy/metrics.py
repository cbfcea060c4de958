"""Prometheus metrics (prefix ``context_proxy_``), one registry per application.

Labels stay low-cardinality: route templates, status classes, an upstream error's status
(400-599 or a word), organization and model at most; never a key, a conversation id or
message text.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                    10, 30, 60, 120, 300, 600)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                     1)

CONTENT_TYPE = CONTENT_TYPE_LATEST
MAX_MODELS = 100

# The _created series double every metric for no use to this proxy's operators.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._models: set[str] = set()
        self.requests = Counter(
            "context_proxy_requests_total", "Requests answered, by route and status class.",
            ["route", "status_class"], registry=r)
        self.request_duration = Histogram(
            "context_proxy_request_duration_seconds",
            "Time from receiving a request to the end of its answer.", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.upstream_duration = Histogram(
            "context_proxy_upstream_duration_seconds",
            "Time from sending a request upstream to the end of its answer.", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.overhead = Histogram(
            "context_proxy_overhead_seconds",
            "The proxy's own time on a request (X-Context-Overhead-Ms): from its arrival to its "
            "answer, less the waits on the upstream and on summary calls.", ["route"],
            buckets=_OVERHEAD_BUCKETS, registry=r)
        # --- context management (SPEC sections 4–6) ---
        self.tokens_received = Counter(
            "context_proxy_received_tokens_total",
            "Prompt tokens in chat requests as clients sent them (estimated).",
            ["org", "model"], registry=r)
        self.tokens_sent = Counter(
            "context_proxy_sent_tokens_total",
            "Prompt tokens in chat requests as forwarded upstream (estimated).",
            ["org", "model"], registry=r)
        self.masked_results = Counter(
            "context_proxy_masked_tool_results_total", "Tool results replaced by a placeholder.",
            ["org"], registry=r)
        self.masked_tokens = Counter(
            "context_proxy_masked_tokens_total", "Tokens freed by masking tool results.",
            ["org"], registry=r)
        self.compactions = Counter(
            "context_proxy_compactions_total",
            "Compaction outcomes: auto, manual, reused, failed, insufficient.", ["outcome"],
            registry=r)
        # (no "summary" in these names: Prometheus reserves the type words)
        self.summary_duration = Histogram(
            "context_proxy_summarization_duration_seconds", "Duration of summary calls.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.summary_tokens = Counter(
            "context_proxy_summarization_output_tokens_total",
            "Tokens of the summaries written.", registry=r)
        self.prepared = Counter(
            "context_proxy_summaries_prepared_total",
            "Summaries prepared in the background, by what became of them: used, unused "
            "(replaced or not fitting when the trigger was crossed), failed, insufficient "
            "(no gain).", ["outcome"], registry=r)
        for outcome in ("used", "unused", "failed", "insufficient"):
            self.prepared.labels(outcome)

        # --- the provider's prompt cache (SPEC sections 4-6) ---
        self.upstream_prompt_tokens = Counter(
            "context_proxy_upstream_prompt_tokens",
            "Prompt tokens the upstream reported, main and summary calls.", ["model"],
            registry=r)
        self.upstream_cached_tokens = Counter(
            "context_proxy_upstream_cached_tokens",
            "Of those, the tokens the upstream served from its prompt cache.", ["model"],
            registry=r)
        self.upstream_cache_write_tokens = Counter(
            "context_proxy_upstream_cache_write_tokens",
            "Of those, the tokens the upstream stored in its prompt cache (cache writes).",
            ["model"], registry=r)
        self.cost_spent = Counter(
            "context_proxy_cost_spent_usd",
            "US dollars the upstream calls cost (main and summary calls), priced from the "
            "policy's models table or litellm's cost map.", ["model"], registry=r)
        self.cost_without_proxy = Counter(
            "context_proxy_cost_without_proxy_usd",
            "US dollars the clients' own requests would have cost without the proxy.",
            ["model"], registry=r)
        self.prefix_rewrites = Counter(
            "context_proxy_prefix_rewrites",
            "Requests whose messages differ from what the conversation's previous request "
            "sent, by the stage that changed them: mask (a masking step), compact (a new "
            "summary).", ["stage"], registry=r)
        for stage in ("mask", "compact"):
            self.prefix_rewrites.labels(stage)
        self.reasoning_lost = Counter(
            "context_proxy_reasoning_lost",
            "Thinking blocks and reasoning items lost on models that bind reasoning to its "
            "history, by cause: compaction (turns a compaction carried as text in its summary "
            "message, without their reasoning), provider (the upstream dropped them, listed "
            "in input_transformations).",
            ["model", "cause"], registry=r)

        self._shadow_metrics(r)

        # --- policies (SPEC section 7) ---
        self.policy_reloads = Counter(
            "context_proxy_policy_reloads_total",
            "Policy folder changes applied without restart.", registry=r)
        self.policy_reload_errors = Counter(
            "context_proxy_policy_reload_errors_total",
            "Policy folder changes rejected (the last good policy stayed in force).",
            registry=r)

        # --- retrieval rerank (SPEC section 8) ---
        self.rerank = Counter(
            "context_proxy_rerank_total",
            "Rerank requests by outcome: applied, skipped, timeout, error, unparsable.",
            ["outcome"], registry=r)
        self.rerank_duration = Histogram(
            "context_proxy_rerank_duration_seconds",
            "Duration of rerank model calls (bounded by rerank.timeout_ms), by outcome.",
            ["outcome"], buckets=_LATENCY_BUCKETS, registry=r)
        for outcome in ("applied", "skipped", "timeout", "error", "unparsable"):
            self.rerank.labels(outcome)  # every outcome exported from the start, at 0

        self._operations(r)
        # Children bound once: ``labels()`` costs microseconds a call, several per request.
        self._overhead_children: dict[str, Any] = {}
        self._upstream_children: dict[str, Any] = {}
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._token_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._usage_children: dict[str, tuple[Any, ...]] = {}
        self._in_flight_children: dict[str, Any] = {}
        self._first_byte_children: dict[str, Any] = {}
        self._error_children: dict[tuple[str, str], Any] = {}

    def _shadow_metrics(self, r: CollectorRegistry) -> None:
        """What the proxy would have done to the requests of organizations in shadow mode."""
        labels = ["org", "model"]
        self.shadow_requests = Counter(
            "context_proxy_shadow_requests_total",
            "Requests of organizations in shadow mode (forwarded as the client sent them).",
            labels, registry=r)
        self.shadow_masked = Counter(
            "context_proxy_shadow_masked_tool_results_total",
            "Tool results masking would have replaced, in shadow mode.", labels, registry=r)
        self.shadow_compactions = Counter(
            "context_proxy_shadow_compactions_total",
            "Compactions (new summaries) the proxy would have made, in shadow mode.", labels,
            registry=r)
        self.shadow_saved_tokens = Counter(
            "context_proxy_shadow_saved_tokens_total",
            "Prompt tokens the proxy would have kept from the upstream, in shadow mode "
            "(estimated, summaries at their budget).", labels, registry=r)
        self.shadow_saved_usd = Counter(
            "context_proxy_shadow_saved_usd",
            "US dollars the proxy would have saved, in shadow mode (estimated from the prompt "
            "side, the summary calls it would have made deducted): the requests that would "
            "have cost less.", labels, registry=r)
        self.shadow_lost_usd = Counter(
            "context_proxy_shadow_lost_usd",
            "US dollars the proxy would have cost more, in shadow mode: the requests (a "
            "compaction's, with its summary call) that would have cost more than the "
            "client's own; the net saving is saved less lost.", labels, registry=r)
        self._shadow_children: dict[tuple[str, str], tuple[Any, ...]] = {}

    def shadowed(self, org: str, model: str, figures: Any) -> None:
        """Count one shadow-mode request's ``ShadowFigures`` (``proxy.context.shadow``)."""
        key = (org, model)
        children = self._shadow_children.get(key)
        if children is None:
            if len(self._shadow_children) > 10_000:  # organizations × models: bounded anyway
                self._shadow_children.clear()
            label = self.model_label(model)
            children = self._shadow_children[key] = tuple(c.labels(org, label) for c in (
                self.shadow_requests, self.shadow_masked, self.shadow_compactions,
                self.shadow_saved_tokens, self.shadow_saved_usd, self.shadow_lost_usd))
        children[0].inc()
        children[1].inc(figures.masked)
        if figures.compaction in ("auto", "manual"):
            children[2].inc()
        children[3].inc(max(0, figures.saved_tokens))
        children[4 if figures.saved_usd >= 0 else 5].inc(abs(figures.saved_usd))

    def _operations(self, r: CollectorRegistry) -> None:
        """What an operator watches besides the stages (SPEC section 9)."""
        self.build_info = Gauge(
            "context_proxy_build_info", "Always 1: the proxy's version and Python version.",
            ["version", "python"], registry=r)
        self.build_info.labels(_version(), platform.python_version()).set(1)
        self.in_flight = Gauge(
            "context_proxy_requests_in_flight", "Requests being answered now, by route.",
            ["route"], registry=r)
        self.upstream_first_byte = Histogram(
            "context_proxy_upstream_time_to_first_byte_seconds",
            "Time from sending a request upstream to its answer's headers, by route: chat, "
            "relay, rerank, and summary or models for the proxy's own calls.", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.console_signins_throttled = Counter(
            "context_proxy_console_signins_throttled_total",
            "Console sign-ins refused with 429, by scope: address (too many wrong tokens from "
            "one client address) or total (from all addresses together).", ["scope"],
            registry=r)
        self.upstream_errors = Counter(
            "context_proxy_upstream_errors_total",
            "Upstream calls that failed, by route and status: the HTTP status of an answer "
            "of 400 or more, unreachable (no connection or no answer) or timeout (no first "
            "byte in CONTEXT_PROXY_UPSTREAM_TIMEOUT_S).", ["route", "status"], registry=r)
        self.policy_last_load = Gauge(
            "context_proxy_policy_last_load_success_timestamp_seconds",
            "When the policy in force was loaded (unix time): at start and at each applied "
            "reload of the policies folder or the stored layers.", registry=r)
        self.policy_reload_ok = Gauge(
            "context_proxy_policy_last_reload_successful",
            "1 when the last change of the policies folder was applied (or none was made "
            "since start), 0 when it was rejected and the last good policy is in force.",
            registry=r)
        self.policy_reload_ok.set(1)  # serve does not start on a broken folder
        self.store_up = Gauge(
            "context_proxy_store_up",
            "1 while the store (SQLite file or PostgreSQL) answers, 0 from a failed or late "
            "call until a probe finds it answering again.", registry=r)
        self.store_up.set(1)
        self.store_writes_queued = Gauge(
            "context_proxy_store_writes_queued",
            "Writes (dividers, spills, usage corrections) the store could not take, queued "
            "to be written when it answers again.", registry=r)
        self.store_writes_lost = Counter(
            "context_proxy_store_writes_lost_total",
            "Writes given up, by what: dividers, spills, usage corrections or usage figures "
            "queued past the limit or still unwritten at shutdown.", ["what"], registry=r)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)  # the shared instances: collected on scrape, nothing else

    def model_label(self, model: str) -> str:
        """``model`` as a label value: clients name models freely, so past ``MAX_MODELS``
        distinct names the rest are counted as ``other`` (a series per name would be unbounded).
        """
        if model in self._models:
            return model
        if len(self._models) >= MAX_MODELS or len(model) > 128:
            return "other"
        self._models.add(model)
        return model

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        key = (route, status // 100)
        children = self._request_children.get(key)
        if children is None:  # routes are templates and status classes few: this stays small
            children = self._request_children[key] = (
                self.requests.labels(route, f"{status // 100}xx"),
                self.request_duration.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def tokens(self, org: str, model: str, received: int, sent: int) -> None:
        """Count a managed request's prompt tokens as received and as sent upstream."""
        key = (org, model)
        children = self._token_children.get(key)
        if children is None:
            if len(self._token_children) > 10_000:  # organizations × models: bounded anyway
                self._token_children.clear()
            label = self.model_label(model)
            children = self._token_children[key] = (
                self.tokens_received.labels(org, label), self.tokens_sent.labels(org, label))
        children[0].inc(received)
        children[1].inc(sent)

    def _model_children(self, model: str) -> tuple[Any, ...]:
        children = self._usage_children.get(model)
        if children is None:
            if len(self._usage_children) > 10_000:
                self._usage_children.clear()
            label = self.model_label(model)
            children = self._usage_children[model] = tuple(c.labels(label) for c in (
                self.upstream_prompt_tokens, self.upstream_cached_tokens,
                self.upstream_cache_write_tokens, self.cost_spent, self.cost_without_proxy))
        return children

    def upstream_usage(self, model: str, prompt_tokens: int, cached_tokens: int,
                       written_tokens: int = 0) -> None:
        """Count what the upstream reported for one call (``model``: the model called)."""
        children = self._model_children(model)
        children[0].inc(prompt_tokens)
        if cached_tokens:  # adding nothing would only take the counter's lock
            children[1].inc(cached_tokens)
        if written_tokens:
            children[2].inc(written_tokens)

    def money(self, model: str, spent: float, without: float) -> None:
        """Count one call's money in US dollars: spent upstream, and without the proxy."""
        children = self._model_children(model)
        if spent:
            children[3].inc(spent)
        if without:
            children[4].inc(without)

    def reasoning(self, model: str, cause: str, count: int) -> None:
        """Count ``count`` thinking blocks or reasoning items lost to ``cause``."""
        self.reasoning_lost.labels(self.model_label(model), cause).inc(count)

    def in_flight_for(self, route: str) -> Any:
        """The in-flight gauge child of ``route`` (a route template: few)."""
        child = self._in_flight_children.get(route)
        if child is None:
            child = self._in_flight_children[route] = self.in_flight.labels(route)
        return child

    def overhead_for(self, route: str) -> Callable[[float], None]:
        """``observe`` of the overhead histogram's child of ``route`` (a route name: few)."""
        child = self._overhead_children.get(route)
        if child is None:
            child = self._overhead_children[route] = self.overhead.labels(route)
        return child.observe

    def upstream_for(self, route: str) -> Callable[[float], None]:
        """``observe`` of the upstream-duration histogram's child of ``route`` (a route name:
        few): one managed call's upstream leg, from sending it to the end of its answer."""
        child = self._upstream_children.get(route)
        if child is None:
            child = self._upstream_children[route] = self.upstream_duration.labels(route)
        return child.observe

    def upstream_answered(self, route: str, status: int, seconds: float) -> None:
        """An upstream answer's headers arrived after ``seconds``; an error status counts."""
        child = self._first_byte_children.get(route)
        if child is None:
            child = self._first_byte_children[route] = self.upstream_first_byte.labels(route)
        child.observe(seconds)
        if status >= 400:
            self.upstream_failed(route, str(status) if status < 600 else "other")

    def upstream_failed(self, route: str, status: str) -> None:
        """An upstream call failed: ``status`` an HTTP status, ``unreachable`` or ``timeout``."""
        key = (route, status)
        child = self._error_children.get(key)
        if child is None:  # routes × statuses 400-599 and two words: bounded
            child = self._error_children[key] = self.upstream_errors.labels(route, status)
        child.inc()

    def policy_loaded(self) -> None:
        """A policy was loaded and is in force now."""
        self.policy_last_load.set(time.time())

    def policy_reload(self, ok: bool) -> None:
        """A change of the policies folder was applied (``ok``) or rejected."""
        (self.policy_reloads if ok else self.policy_reload_errors).inc()
        self.policy_reload_ok.set(1 if ok else 0)
        if ok:
            self.policy_loaded()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _version() -> str:
    try:
        return metadata.version("context-proxy")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
