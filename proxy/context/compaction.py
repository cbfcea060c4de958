"""Compaction at the service edge: the summary call(s) for a plan, then the rewritten list.

The stages decide what to summarize (``proxy.context.stages``); this module pays for it. The
summarizer reads the original text of what it summarizes (the list before masking), so a
fact buried in a masked tool output survives into the summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.context.offload import Offload
from proxy.context.stages.compact import CompactionPlan, apply_summary
from proxy.context.stages.scope import Scope
from proxy.context.summarizer import Summarizer, summarize_messages


@dataclass(frozen=True)
class Compacted:
    """A made summary and the list rewritten around it. ``status`` is ``insufficient`` when the
    rewritten list is still over the trigger (the no-loop rule then waits), and ``gain`` is
    false when the rewrite did not shrink the list at all (then it is not used)."""

    status: Literal["compacted", "insufficient"]
    messages: list[dict[str, Any]]
    tokens_after: int
    summary: str
    calls: int
    gain: bool


async def compact(cplan: CompactionPlan, masked: Sequence[Mapping[str, Any]],
                  originals: Sequence[Mapping[str, Any]], scope: Scope, summarize: Summarizer,
                  summary_scope: Scope, offload: Offload) -> Compacted:
    """Summarize what ``cplan`` covers and rewrite the ``masked`` list around the summary.

    ``originals`` aligns with ``masked`` index by index and holds the unmasked text the
    summarizer reads. ``summary_scope`` names the summary model and its window (whose tokenizer
    counts the prompts). Raises ``SummaryFailed`` (or the summarizer's own error) when no
    summary was made; the caller fails open.
    """
    if len(originals) != len(masked):
        raise ValueError("originals must align with the masked list one to one")
    text, calls = await summarize_messages(
        [originals[i] for i in cplan.summarize], counter=summary_scope.counter,
        model=summary_scope.model, summarize=summarize, max_tokens=cplan.summary_max_tokens,
        summary_window=summary_scope.window or cplan.window, offload=offload)
    rewritten = apply_summary(masked, cplan, text, scope.policy)
    after = await offload(scope.count, rewritten)
    status: Literal["compacted", "insufficient"] = \
        "insufficient" if after > cplan.trigger_tokens else "compacted"
    return Compacted(status, rewritten, after, text, calls, gain=after < cplan.tokens_before)
