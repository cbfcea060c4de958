"""What every stage works against, as one small frozen value."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.formula import REPLY_PRIMING
from proxy.policy.model import Policy


@dataclass(frozen=True)
class StepPrices:
    """What a masking step weighs (``proxy.context.stages.mask.pays``), in input prices: a cached
    token (``read``) and a token written to the cache (``write``: 1.0 where the provider bills
    no writes). Unknown prices: reads at 0.1 and writes at 1.25 (the dearer guess)."""

    read: float = 0.1
    write: float = 1.25


@dataclass(frozen=True, eq=False)
class Scope:
    """The policy in force, the model's window (``None``: unknown), the token counter, the
    request's model and its ``tools`` schemas (``None``: none). ``bound``: the model binds
    the reasoning the request replays to its prefix (``proxy.context.binding``), so every
    change the stages make to what was sent before costs that reasoning: masking leaves its
    steps to compaction, and a compaction leaves nothing made before it after its summary.
    ``prices``: the model's, for masking's decisions."""

    policy: Policy
    window: int | None
    counter: TokenCounter
    model: str
    tools: Sequence[Any] | None = None
    bound: bool = False
    prices: StepPrices = StepPrices()

    @property
    def compaction_window(self) -> int:
        """The window compaction works against: the known window, else the fallback."""
        return self.window or self.policy.fallback_window

    @cached_property
    def tools_tokens(self) -> int:
        """Tokens of the request's tools schemas (counted once per scope)."""
        return self.counter.tools_tokens(self.tools, self.model)

    def overhead(self) -> int:
        """Tokens a request costs beyond its messages: reply priming plus the tools schemas."""
        return REPLY_PRIMING + self.tools_tokens

    def count(self, messages: Sequence[Any]) -> int:
        """Prompt tokens of ``messages`` sent with this scope's tools."""
        return self.counter.count_messages(messages, self.model, self.tools)

    def with_window(self, window: int | None) -> Scope:
        return replace(self, window=window)
