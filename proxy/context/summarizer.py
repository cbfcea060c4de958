"""The summary calls: one litellm call per prompt against the same upstream, and the rounds that
summarize a long covered range in pieces and merge them.

litellm is imported lazily (``proxy.upstream.lazy``) and always with the local model cost map,
so nothing but the configured upstream is ever contacted. The prompts themselves are built by
the pure ``proxy.context.stages.summary``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from proxy.context.offload import Offload
from proxy.context.stages.summary import (
    Budget,
    Prompt,
    SummaryFailed,
    merge_prompts,
    summary_prompts,
)
from proxy.context.tokens import TokenCounter
from proxy.upstream import lazy

Summarizer = Callable[[Prompt, int], Awaitable[str]]
"""``async (prompt messages, max_tokens) -> summary text``; raises on any failure."""

CONCURRENCY = 4  # partial summaries requested at once


def make_summarizer(base_url: str, api_key: str | None, model: str, org: str,
                    timeout_s: float) -> Summarizer:
    """A ``Summarizer`` calling ``model`` at ``base_url`` (OpenAI-compatible) through litellm.

    No ``tools`` are sent and plain text is asked for, so the answer cannot be a tool call. An
    error, a timeout or an empty answer raises; an error text is never returned as a summary.
    """

    async def summarize(messages: Prompt, max_tokens: int) -> str:
        litellm = lazy.litellm()  # blocking once per process, on the loop's thread
        try:
            async with asyncio.timeout(timeout_s):
                resp = await litellm.acompletion(
                    model=f"openai/{model}", api_base=base_url, api_key=api_key or "none",
                    messages=messages, max_tokens=max_tokens, temperature=0,
                    timeout=timeout_s, num_retries=0, max_retries=0, user=org,
                    extra_headers={"X-Context-Proxy-Org": org})
        except TimeoutError:
            raise SummaryFailed(f"summary call timed out after {timeout_s:g} s") from None
        except Exception as e:  # litellm maps upstream errors to its own exception types
            raise SummaryFailed(f"summary call failed: {type(e).__name__}") from None
        choice = resp.choices[0] if resp.choices else None
        text = getattr(getattr(choice, "message", None), "content", None)
        if not isinstance(text, str) or not text.strip():
            raise SummaryFailed("summary call returned no text")
        if getattr(choice, "finish_reason", None) == "tool_calls":
            raise SummaryFailed("summary call answered with a tool call")
        return text

    return summarize


async def _call(summarize: Summarizer, prompt: Prompt, budget: Budget) -> str:
    text = (await summarize(prompt, budget.max_tokens) or "").strip()
    if not text:
        raise SummaryFailed("the summarizer returned an empty summary")
    # A summarizer that ignores max_tokens must not overflow the merge step.
    return budget.counter.truncate_text(text, budget.model, budget.max_tokens)


async def _gather(summarize: Summarizer, prompts: list[Prompt], budget: Budget) -> list[str]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(prompt: Prompt) -> str:
        async with gate:
            return await _call(summarize, prompt, budget)

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
) -> tuple[str, int]:
    """Summarize ``messages`` (original text) within ``summary_window``; (summary, calls made).

    ``model`` is the summary model, whose tokenizer counts the prompts; ``offload`` runs the
    prompt building where the service decided. Raises ``SummaryFailed`` on an empty answer or
    when no summary fits; the summarizer's own exceptions propagate.
    """
    budget, prompts = await offload(summary_prompts, messages, counter, model, max_tokens,
                                    summary_window)
    calls = len(prompts)
    partials = await _gather(summarize, prompts, budget)
    while len(partials) > 1:
        merges = merge_prompts(budget, partials)
        if len(merges) >= len(partials):  # cannot happen with the budget's 3x rule; never loop
            raise SummaryFailed("partial summaries do not fit the summary window to merge")
        calls += len(merges)
        partials = await _gather(summarize, merges, budget)
    return partials[0], calls
