"""What a session costs when a provider bills a cached prompt prefix at a fraction of the price.

Shared by the demo and ``bench/session_cost.py``. A call's cost, in units of one uncached prompt
token: ``(prompt - cached) + price × cached`` (completion tokens are the same with or without the
proxy and are left out). The baseline is the client's own pass-through: every turn sends the
whole history, and is served from cache up to the previous turn's prompt, as if the window
were infinite, under the same rules as ``PromptCache`` (nothing under 1,024 shared tokens, then
steps of 128).

Where the provider bills cache writes (``priced``), the tokens a call writes to the cache cost
``write`` × input: what the upstream reported (OpenAI's ``cache_write_tokens``, Anthropic's
``cache_creation_input_tokens``), and for the pass-through baseline what ``PromptCache`` would
write (the prompt rounded down to its steps, past the cached part, nothing under 1,024 tokens).
The rest of the uncached prompt is plain input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_CACHED = 1024
CACHE_STEP = 128
REPLY_PRIMING = 3  # counted in a prompt, never part of the next prompt's prefix


@dataclass(frozen=True)
class Call:
    """One upstream call: prompt tokens, the cached part, whether it was a summary call."""

    prompt_tokens: int
    cached_tokens: int
    summary: bool = False
    written_tokens: int = 0  # of the uncached part, what the call wrote to the cache


def cacheable(shared: int) -> int:
    """The cached part of a ``shared``-token prefix under the provider's rules."""
    return shared // CACHE_STEP * CACHE_STEP if shared >= MIN_CACHED else 0


def written(prompt: int, cached: int) -> int:
    """What a ``prompt``-token call with ``cached`` tokens read writes to the cache (the fake
    upstream's ``PromptCache.written``)."""
    return max(0, prompt // CACHE_STEP * CACHE_STEP - cached) if prompt >= MIN_CACHED else 0


def passthrough(prompts: Sequence[int]) -> list[Call]:
    """The client's own calls, each cached up to the previous turn's prompt (and writing the
    rest of it to the cache)."""
    calls, previous = [], 0
    for p in prompts:
        cached = min(p, cacheable(previous - REPLY_PRIMING))
        calls.append(Call(p, cached, written_tokens=written(p, cached)))
        previous = p
    return calls


def cost(calls: Sequence[Call], price: float) -> float:
    return sum(c.prompt_tokens - c.cached_tokens + price * c.cached_tokens for c in calls)


def priced(calls: Sequence[Call], read: float, write: float) -> float:
    """Cost in uncached-input units where the provider bills cache writes: cached tokens at
    ``read``, written ones at ``write``, the rest of the prompt at 1."""
    return sum((c.prompt_tokens - c.cached_tokens - c.written_tokens)
               + write * c.written_tokens + read * c.cached_tokens for c in calls)


def cached_share(calls: Sequence[Call]) -> float:
    prompt = sum(c.prompt_tokens for c in calls)
    return sum(c.cached_tokens for c in calls) / prompt if prompt else 0.0
