"""The summary calls: each one a chat completion against the same upstream, through the shared
session, and the rounds that summarize a long covered range in pieces and merge them.

The calls go through ``proxy.upstream.completion`` rather than a client library, so a summary
request that rides the prompt cache sends the conversation's messages exactly as they were sent
(a library may rewrite them, for example drop a null ``content``, and break the shared prefix).
The prompts themselves are built by the pure ``proxy.context.stages.summary``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from proxy.auth import Principal
from proxy.context.offload import Offload
from proxy.context.stages.summary import (
    Budget,
    Prompt,
    SummaryFailed,
    clean_cut,
    merge_prompts,
    summary_prompts,
)
from proxy.context.tokens.counter import TokenCounter
from proxy.errors import ApiError
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed, complete
from proxy.upstream.usage import UpstreamUsage


@dataclass(frozen=True)
class Answer:
    """A summary call's text and what the upstream reported for its prompt."""

    text: str
    usage: UpstreamUsage = field(default_factory=UpstreamUsage)
    truncated: bool = False  # longer than max_tokens: cut at a sentence or line end


class Summarizer(Protocol):
    """Makes one summary call: the prompt messages, the answer's ``max_tokens`` and, for a call
    that rides the conversation's cached prefix, its ``tools`` (then it must answer in text,
    ``tool_choice: "none"``). Raises on any failure; returns the text or an ``Answer``."""

    def __call__(self, messages: Prompt, max_tokens: int,
                 tools: Sequence[Any] | None = None) -> Awaitable[str | Answer]: ...


CONCURRENCY = 4  # partial summaries requested at once


def upstream_summarizer(upstream: Upstream, api_key: str | None, model: str,
                        timeout_s: float, headers: Mapping[str, str] | None = None
                        ) -> Summarizer:
    """A ``Summarizer`` calling ``model`` at the upstream with the caller's key (and
    ``headers`` on each call). An error, a timeout, a tool call or an empty answer raises
    ``SummaryFailed``; an error text is never returned as a summary."""

    async def summarize(messages: Prompt, max_tokens: int,
                        tools: Sequence[Any] | None = None) -> Answer:
        payload: dict[str, Any] = {"model": model, "messages": messages,
                                   "max_tokens": max_tokens, "temperature": 0}
        if tools:
            payload |= {"tools": list(tools), "tool_choice": "none"}
        try:
            async with asyncio.timeout(timeout_s):
                answer = await complete(upstream, api_key, payload, headers)
        except TimeoutError:
            raise SummaryFailed(f"summary call timed out after {timeout_s:g} s") from None
        except (CompletionFailed, ApiError) as e:
            raise SummaryFailed(f"summary call failed: {e}") from None
        if answer.finish_reason == "tool_calls":
            raise SummaryFailed("summary call answered with a tool call")
        if not answer.content or not answer.content.strip():
            raise SummaryFailed("summary call returned no text")
        return Answer(answer.content, UpstreamUsage(answer.prompt_tokens, answer.cached_tokens,
                                                    answer.written_tokens,
                                                    answer.completion_tokens))

    return summarize


async def call(summarize: Summarizer, prompt: Prompt, max_tokens: int, counter: TokenCounter,
               model: str, tools: Sequence[Any] | None = None) -> Answer:
    """One summary call, its text checked and cut to ``max_tokens`` (a summarizer that ignores
    ``max_tokens`` must not overflow the merge step or the rewritten list)."""
    got = await (summarize(prompt, max_tokens, tools) if tools else
                 summarize(prompt, max_tokens))
    answer = got if isinstance(got, Answer) else Answer(got or "")
    text = answer.text.strip()
    if not text:
        raise SummaryFailed("the summarizer returned an empty summary")
    cut = counter.truncate_text(text, model, max_tokens)
    if cut == text:
        return Answer(text, answer.usage)
    return Answer(clean_cut(cut), answer.usage, truncated=True)


async def _call(summarize: Summarizer, prompt: Prompt, budget: Budget,
                answers: list[Answer]) -> str:
    answer = await call(summarize, prompt, budget.max_tokens, budget.counter, budget.model)
    answers.append(answer)
    return answer.text


async def _gather(summarize: Summarizer, prompts: list[Prompt], budget: Budget,
                  answers: list[Answer]) -> list[str]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(prompt: Prompt) -> str:
        async with gate:
            return await _call(summarize, prompt, budget, answers)

    tasks = [asyncio.ensure_future(one(p)) for p in prompts]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:  # one failed: the summary cannot be made, stop paying for the rest
            task.cancel()
        raise


async def summarize_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    counter: TokenCounter,
    model: str,
    summarize: Summarizer,
    max_tokens: int,
    summary_window: int,
    offload: Offload,
) -> tuple[str, list[Answer]]:
    """Summarize ``messages`` (original text) within ``summary_window``: the summary and every
    call's answer (pieces, then merges).

    ``model`` is the summary model, whose tokenizer counts the prompts; ``offload`` runs the
    prompt building where the service decided. Raises ``SummaryFailed`` on an empty answer or
    when no summary fits; the summarizer's own exceptions propagate.
    """
    budget, prompts = await offload(summary_prompts, messages, counter, model, max_tokens,
                                    summary_window)
    answers: list[Answer] = []
    partials = await _gather(summarize, prompts, budget, answers)
    while len(partials) > 1:
        merges = merge_prompts(budget, partials)
        if len(merges) >= len(partials):  # cannot happen with the budget's 3x rule; never loop
            raise SummaryFailed("partial summaries do not fit the summary window to merge")
        partials = await _gather(summarize, merges, budget, answers)
    return partials[0], answers


SummarizerFactory = Callable[[Principal, str, float], Summarizer]
"""(caller, summary model, timeout in seconds) -> the summarizer to call for them."""


def org_header(org: str) -> str:
    """The organization as a header value: as it is when printable ASCII, else
    percent-encoded (a header cannot carry a line break, and non-ASCII bytes are ambiguous)."""
    return org if org.isascii() and org.isprintable() else quote(org, safe="")


def upstream_summarizers(upstream: Upstream,
                         send_org: Callable[[], bool] = lambda: False) -> SummarizerFactory:
    """Summary calls to the upstream through the shared session, with the caller's key; they
    carry ``X-Context-Proxy-Org: <org>`` while ``send_org()`` says so (read per compaction, so
    a policy reload takes effect at once)."""
    def make(principal: Principal, model: str, timeout_s: float) -> Summarizer:
        headers = {"X-Context-Proxy-Org": org_header(principal.org)} if send_org() else None
        return upstream_summarizer(upstream, principal.upstream_key, model, timeout_s, headers)

    return make
