"""What every stage works against, as one small frozen value."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.tokens import TokenCounter
from proxy.policy.model import Policy


@dataclass(frozen=True, eq=False)
class Scope:
    """The policy in force, the model's window (``None``: unknown), the token counter, the
    request's model and its ``tools`` schemas (``None``: none)."""

    policy: Policy
    window: int | None
    counter: TokenCounter
    model: str
    tools: Sequence[Any] | None = None

    @property
    def compaction_window(self) -> int:
        """The window compaction works against: the known window, else the fallback."""
        return self.window or self.policy.fallback_window

    def overhead(self) -> int:
        """Tokens a request costs beyond its messages: reply priming plus the tools schemas."""
        return self.counter.overhead(self.model, self.tools)

    def count(self, messages: Sequence[Any]) -> int:
        """Prompt tokens of ``messages`` sent with this scope's tools."""
        return self.counter.count_messages(messages, self.model, self.tools)

    def with_window(self, window: int | None) -> Scope:
        return replace(self, window=window)
