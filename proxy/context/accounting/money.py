"""Money (SPEC section 5, "Honest savings"): what each upstream call cost, and what the client's
own request would have cost without the proxy. Pure and synchronous: figures in, figures out.

- Prices per token come from the policy's ``models`` table (dollars per million tokens), each
  price it leaves out from litellm's cost map (``input_cost_per_token``,
  ``cache_read_input_token_cost``, ``cache_creation_input_token_cost``,
  ``output_cost_per_token``); a model without a cache-read price pays the input price for cache
  reads, one without a cache-write price 1.25× the input price for writes. A model neither
  knows costs nothing (every price 0).
- A call costs ``uncached × input + cached × read + written × write + output × output``
  (``uncached``: its prompt tokens neither read from nor written to the cache).
- Without the proxy the client's request would have sent its whole prompt (the upstream's count
  scaled by the proxy's estimates of the transcript as the client sent it and as it went up),
  read from the cache up to the client's previous request of the conversation, written to it
  beyond that (when the provider reported cache writes for the call), with the same output,
  less the redo of the reasoning lost on a model that binds it (``REDO_TOKENS`` output tokens
  for each item the provider dropped or the proxy's compaction carried without its reasoning):
  the client's own request, which only appends, would have lost none.
  When this request and the previous one went upstream as the client sent them, the upstream's
  own figures are that request's: then nothing is saved and nothing is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.model import ModelPrices
from proxy.upstream.usage import UpstreamUsage

WRITE_MARKUP = 1.25  # a cache write's price, in input prices, when the cost map has none
REDO_TOKENS = 300  # output tokens a lost reasoning item makes the model redo (an estimate)
_MTOK = 1_000_000


@dataclass(frozen=True)
class Prices:
    """US dollars per token."""

    input: float = 0.0
    cached: float = 0.0
    written: float = 0.0
    output: float = 0.0


@dataclass(frozen=True)
class Money:
    """One request's money in US dollars: ``spent`` upstream (its summary calls' included when
    booked), ``without`` the proxy."""

    spent: float = 0.0
    without: float = 0.0

    @property
    def saved(self) -> float:
        return self.without - self.spent

    def headers(self) -> dict[str, str]:
        """``X-Context-Cost-Spent`` and ``X-Context-Cost-Saved``, in micro-dollars (integers;
        saved is negative when the proxy cost more)."""
        return {"X-Context-Cost-Spent": str(round(self.spent * _MTOK)),
                "X-Context-Cost-Saved": str(round(self.saved * _MTOK))}


@dataclass(frozen=True)
class Baseline:
    """The client's previous request of a conversation: its prompt as the upstream would count
    it, whether it went upstream as the client sent it, whether the provider reported cache
    writes for it."""

    client_prompt: int
    as_sent: bool
    writes: bool = False


def _candidates(model: str) -> list[str]:
    return [model, model.split("/", 1)[1]] if "/" in model else [model]


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def own_prices(model: str, table: Mapping[str, ModelPrices]) -> ModelPrices:
    """``model``'s entry in the policy's ``table`` (tried as named, then without a provider
    prefix); no prices of its own when it has none."""
    return next((table[n] for n in _candidates(model) if n in table), ModelPrices())


def prices(model: str, table: Mapping[str, ModelPrices], cost_map: Mapping[str, Any]) -> Prices:
    """``model``'s prices: the policy's ``table`` first, price by price, then ``cost_map``
    (litellm's model map); names are tried as given, then without a provider prefix."""
    own = own_prices(model, table)
    entry: Mapping[str, Any] = next((cost_map[n] for n in _candidates(model)
                  if isinstance(cost_map.get(n), Mapping)), {})

    def pick(mine: float | None, key: str) -> float | None:
        return mine / _MTOK if mine is not None else _number(entry.get(key))

    base = pick(own.input_per_mtok, "input_cost_per_token") or 0.0
    cached = pick(own.cached_per_mtok, "cache_read_input_token_cost")
    written = pick(own.write_per_mtok, "cache_creation_input_token_cost")
    output = pick(own.output_per_mtok, "output_cost_per_token")
    return Prices(base, base if cached is None else cached,
                  base * WRITE_MARKUP if written is None else written, output or 0.0)


def cost(usage: UpstreamUsage, p: Prices) -> float:
    """What one call with ``usage`` costs at prices ``p``, in US dollars."""
    uncached = max(0, usage.prompt - usage.cached - usage.written)
    return (uncached * p.input + usage.cached * p.cached + usage.written * p.written
            + usage.output * p.output)


def client_prompt(usage: UpstreamUsage, before: int, after: int) -> int:
    """The client's own prompt as the upstream would have counted it: the upstream's count of
    what was sent, scaled by the estimates of the client's transcript (``before``) and of what
    was sent (``after``)."""
    if before == after or after <= 0:
        return usage.prompt
    return round(usage.prompt * before / after)


def without_proxy(usage: UpstreamUsage, before: int, after: int, as_sent: bool,
                  previous: Baseline | None, lost: int = 0) -> UpstreamUsage:
    """The usage the client's own request would have reported (see the module's contract);
    ``lost``: reasoning items this request lost (their redo is in its output)."""
    output = max(0, usage.output - lost * REDO_TOKENS)
    if as_sent and (previous is None or previous.as_sent):
        return UpstreamUsage(usage.prompt, usage.cached, usage.written, output)
    prompt = client_prompt(usage, before, after)
    caches = usage.cached > 0 or usage.written > 0  # the provider caches this conversation
    cached = min(prompt, previous.client_prompt) if caches and previous is not None else 0
    written = prompt - cached if usage.written > 0 else 0
    return UpstreamUsage(prompt, cached, written, output)


def estimate(before: int, after: int, kept: int, as_sent: bool, previous: Baseline | None,
             p: Prices, writes: bool) -> Money:
    """A request's money from its prompt side alone, before the upstream answered (a streamed
    answer's headers): ``after`` tokens sent, the first ``kept`` of them the previous request's
    (what a cache can serve), the rest written when the provider bills ``writes``; the
    client's own ``before`` tokens read from cache up to its previous request. Output unknown:
    left out of both."""
    sent = UpstreamUsage(after, kept, (after - kept) if writes else 0)
    if as_sent and (previous is None or previous.as_sent):
        return Money(cost(sent, p), cost(sent, p))
    cached = min(before, previous.client_prompt) if previous is not None else 0
    mine = UpstreamUsage(before, cached, (before - cached) if writes else 0)
    return Money(cost(sent, p), cost(mine, p))
