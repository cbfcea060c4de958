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

from proxy.auth import Principal
from proxy.context.adapters import Adapted
from proxy.context.stages.summary import Prompt, SummaryFailed
from proxy.context.summarizer import Answer, Summarizer
from proxy.errors import ApiError
from proxy.upstream import apis
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed

ApiSummarizerFactory = Callable[[Principal, str, float, Adapted], Summarizer]


# What a summary call that rides the cached prefix repeats of the request: on the Messages API a
# change of tools, tool_choice or the thinking setting invalidates the cached messages.
_PREFIX_FIELDS = {"messages": ("tools", "tool_choice", "thinking"), "responses": ("tools",)}
_ROUTING_FIELDS = {"messages": (), "responses": ("prompt_cache_key",)}  # where the cache lives


def payload(adapted: Adapted, model: str, messages: Prompt, max_tokens: int,
            cached: bool) -> dict[str, Any]:
    """The summary request in ``adapted``'s API. ``cached``: it rides the conversation's
    prefix, so it repeats what the provider keys that prefix's cache on, as the client sent it
    (tools, and on the Messages API ``tool_choice`` and ``thinking``); the Responses API's
    cache is not keyed by ``tool_choice``, so there it says ``none``. The request's cache
    routing (``prompt_cache_key``) goes on every call."""
    body = adapted.body
    doc: dict[str, Any] = {"model": model, **adapted.prompt(messages)}
    doc |= {k: body[k] for k in _ROUTING_FIELDS[adapted.api] if k in body}
    if cached:
        doc |= {k: body[k] for k in _PREFIX_FIELDS[adapted.api] if k in body}
    if adapted.api == "messages":
        doc["max_tokens"] = max_tokens + _thinking_budget(doc.get("thinking"))
        if "thinking" not in doc:  # thinking takes only the default temperature
            doc["temperature"] = 0
    else:
        doc |= {"max_output_tokens": max(16, max_tokens), "store": False}
        if "tools" in doc:
            doc["tool_choice"] = "none"
    return doc


def _thinking_budget(thinking: Any) -> int:
    """The tokens a thinking setting may spend before the answer (``max_tokens`` must exceed
    them)."""
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    return budget if isinstance(budget, int) and not isinstance(budget, bool) \
        and thinking.get("type") == "enabled" else 0


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
                                          {**adapted.headers, **(headers(principal) or {})})
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
