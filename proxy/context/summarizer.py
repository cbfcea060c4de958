"""The summary call: litellm against the same upstream, on behalf of the caller's organization.

litellm is imported lazily (``proxy.upstream.lazy``) and always with the local model cost map,
so nothing but the configured upstream is ever contacted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.context.stages.summary import Summarizer, SummaryFailed
from proxy.upstream import lazy


def make_summarizer(base_url: str, api_key: str | None, model: str, org: str,
                    timeout_s: float) -> Summarizer:
    """A ``Summarizer`` calling ``model`` at ``base_url`` (OpenAI-compatible) through litellm.

    No ``tools`` are sent and plain text is asked for, so the answer cannot be a tool call. An
    error, a timeout or an empty answer raises; an error text is never returned as a summary.
    """

    async def summarize(messages: list[dict[str, Any]], max_tokens: int) -> str:
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
