"""Summary calls in the request's own API (Anthropic Messages, OpenAI Responses), so that a call
riding the conversation's cached prefix sends that prefix exactly as the conversation sent it:
the same system prompt, tools and leading messages, then the instruction, ``tool_choice: none``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.auth import Principal
from proxy.context.adapters import Adapted
from proxy.context.stages.summary import Prompt, SummaryFailed
from proxy.context.summarizer import Answer, Summarizer
from proxy.errors import ApiError
from proxy.upstream import apis
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed

ApiSummarizerFactory = Callable[[Principal, str, float, Adapted], Summarizer]


def payload(adapted: Adapted, model: str, messages: Prompt, max_tokens: int,
            cached: bool) -> dict[str, Any]:
    """The summary request in ``adapted``'s API. ``cached``: it rides the conversation's
    prefix, so it carries the request's own tools, which it may not call."""
    doc: dict[str, Any] = {"model": model, **adapted.prompt(messages)}
    if adapted.api == "messages":
        doc |= {"max_tokens": max_tokens, "temperature": 0}
        if cached and adapted.raw_tools:
            doc |= {"tools": adapted.raw_tools, "tool_choice": {"type": "none"}}
    else:
        doc |= {"max_output_tokens": max(16, max_tokens), "store": False}
        if cached and adapted.raw_tools:
            doc |= {"tools": adapted.raw_tools, "tool_choice": "none"}
    return doc


def api_summarizers(upstreams: Mapping[str, Upstream],
                    headers: Callable[[Principal], Mapping[str, str] | None] = lambda p: None
                    ) -> ApiSummarizerFactory:
    """Summarizers for requests of the other APIs: ``upstreams`` maps an API to where it goes."""
    def make(principal: Principal, model: str, timeout_s: float, adapted: Adapted
             ) -> Summarizer:
        upstream = upstreams[adapted.api]

        async def summarize(messages: Prompt, max_tokens: int,
                            tools: Sequence[Any] | None = None) -> Answer:
            body = payload(adapted, model, messages, max_tokens, cached=bool(tools))
            try:
                async with asyncio.timeout(timeout_s):
                    got = await apis.call(upstream, adapted.api, principal.upstream_key, body,
                                          headers(principal))
            except TimeoutError:
                raise SummaryFailed(f"summary call timed out after {timeout_s:g} s") from None
            except (CompletionFailed, ApiError) as e:
                raise SummaryFailed(f"summary call failed: {e}") from None
            if got.tool_call:
                raise SummaryFailed("summary call answered with a tool call")
            if not got.text or not got.text.strip():
                raise SummaryFailed("summary call returned no text")
            return Answer(got.text, got.prompt_tokens, got.cached_tokens)

        return summarize

    return make
