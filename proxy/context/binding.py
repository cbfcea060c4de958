"""Which models bind replayed reasoning to the exact history before it (SPEC section 5).

On these models a thinking block (Anthropic's preserved thinking) or a reasoning item (OpenAI's
newest models) sent back is valid only while its prefix (system, tools and everything before
it) is what it was when the block was made; Anthropic refuses a changed one with a 400 (or
drops it under its binding controls), OpenAI drops it and the model redoes the reasoning.

The built-in list follows the providers' documentation: Claude Fable and Mythos 5.x, Opus,
Sonnet and Haiku 5.5; OpenAI's GPT-5.6 and later. The policy's ``models`` table overrides it
per model name (``reasoning_bound: true|false``), for names the list cannot know (a gateway's
alias, a fine-tune) or a provider that changes its rules.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from proxy.policy.model import Policy

if TYPE_CHECKING:
    from proxy.context.stages.plan import Plan


class _Reasoned(Protocol):
    @property
    def reasoning(self) -> bool: ...
    @property
    def reasoned(self) -> frozenset[int]: ...


# Anthropic names, found anywhere in the name (dates and cloud prefixes vary:
# ``claude-opus-5-5-20261001``, ``us.anthropic.claude-sonnet-5-5``).
_ANTHROPIC = re.compile(r"claude-(?:fable|mythos)-5(?![0-9])|claude-(?:opus|sonnet|haiku)-5-5")
# OpenAI's numbered GPT names: ``gpt-5.6``, ``gpt-5.6-codex``, ``gpt-6``.
_OPENAI = re.compile(r"(?:^|/)gpt-(\d+)(?:\.(\d+))?")


def builtin_bound(model: str) -> bool:
    """Whether the providers document ``model`` as binding reasoning to its prefix."""
    name = model.lower()
    if _ANTHROPIC.search(name):
        return True
    found = _OPENAI.search(name)
    if found is None:
        return False
    major, minor = int(found.group(1)), int(found.group(2) or 0)
    return major > 5 or (major == 5 and minor >= 6)


def reasoning_bound(model: str, policy: Policy, seen: Collection[str] = ()) -> bool:
    """The policy's ``models.<name>.reasoning_bound`` when set, else the built-in list or
    ``seen`` (models whose provider was seen dropping reasoning for a changed prefix)."""
    override = policy.bound.get(model)
    return (builtin_bound(model) or model in seen) if override is None else override


class Bindings:
    """Which models bind reasoning: the policy and the built-in list, and what the providers'
    answers showed (a model whose answer listed reasoning dropped for a changed prefix binds
    it, whatever the list says; at most ``LEARNED`` names are kept, in this process)."""

    LEARNED = 1_000

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def learn(self, model: str) -> None:
        if model not in self.seen and len(self.seen) < self.LEARNED:
            self.seen.add(model)

    def binds(self, adapted: _Reasoned | None, model: str, policy: Policy) -> bool:
        """Whether a request (read by its API's adapter; ``None``: chat completions, which
        carry no bound reasoning) asks for or replays reasoning on a model that binds it."""
        return adapted is not None and adapted.reasoning and \
            reasoning_bound(model, policy, self.seen)


def removed(adapted: _Reasoned | None, plan: Plan) -> int:
    """How many turns that carried reasoning a compaction on a bound model left in the list
    without it: the turns it carried as text inside its summary message (the ones a summary
    replaced need no reasoning; these the model still reads, and redoes what it thought)."""
    if adapted is None or plan.compaction is None:
        return 0
    origin = plan.view.origin
    return sum(1 for i in plan.compaction.carried if origin[i] in adapted.reasoned)
