"""Summary calls in the request's own API (Anthropic Messages, OpenAI Responses), speaking like
the client: the request's API headers (betas, versions) and cache routing on every call, and on a
call riding the conversation's cached prefix that prefix exactly as the conversation sent it: the
same system prompt, tools (and on the Messages API ``tool_choice`` and ``thinking``) and leading
messages, then the instruction. An answer that is a tool call is not a summary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.apis import APIS, calls
from proxy.auth import Principal
from proxy.context.adapters import Adapted
from proxy.context.stages.summary import Prompt, SummaryFailed
from proxy.context.summary.summarizer import Answer, Summarizer
from proxy.errors import ApiError
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed

ApiSummarizerFactory = Callable[[Principal, str, float, Adapted], Summarizer]


def payload(adapted: Adapted, model: str, messages: Prompt, max_tokens: int,
            cached: bool) -> dict[str, Any]:
    """The summary request in ``adapted``'s API (its ``Api.summary_body``). ``cached``: it
    rides the conversation's prefix, so it repeats what the provider keys that prefix's cache
    on, as the client sent it."""
    make = APIS[adapted.api].summary_body
    assert make is not None
    return make(adapted, model, messages, max_tokens, cached)


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
                    got = await calls.call(upstream, APIS[adapted.api], principal.upstream_key,
                                          body,
                                          {**adapted.headers, **(headers(principal) or {})})
            except TimeoutError:
                raise SummaryFailed(f"summary call timed out after {timeout_s:g} s") from None
            except (CompletionFailed, ApiError) as e:
                raise SummaryFailed(f"summary call failed: {e}") from None
            if got.tool_call:
                raise SummaryFailed("summary call answered with a tool call")
            if not got.text or not got.text.strip():
                raise SummaryFailed("summary call returned no text")
            return Answer(got.text, got.usage)

        return summarize

    return make
