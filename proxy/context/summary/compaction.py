"""Compaction at the service edge: the summary call(s) for a plan, then the rewritten list.

The stages decide what to summarize (``proxy.context.stages``); this module pays for it. When
the summary model is the request's own model, the summary call rides the provider's prompt
cache: it sends the covered range as it is sent (a prefix of the conversation's last request)
with the same tools, then what that prefix lacks (the original text of masked outputs in the
covered range, so a fact buried in one survives) and the instruction last. When those originals
do not fit beside the prefix, they are first condensed into notes that do (from a transcript of
them alone, in pieces when long), and the notes go after the prefix instead, if the room beside
it holds their share of the summary and the notes come back whole. Otherwise, when not even the
prefix fits, or another model summarizes, the covered range is summarized from a transcript,
in pieces and then merged when it is long.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.context.offload import Offload
from proxy.context.stages.compact import CompactionPlan, apply_summary
from proxy.context.stages.scope import Scope
from proxy.context.stages.summary import (
    Prompt,
    masked_originals,
    prefix_prompt,
    restored_text,
    with_carried,
)
from proxy.context.summary.summarizer import Answer, Summarizer, call, summarize_messages

MIN_NOTES = 256  # tokens: less room than this beside the prefix is not worth a notes call
SHORTEST_ANSWER = 0.5  # of the summary's max_tokens: the least a summary on the prefix may have
NOTES_FRAME = 64  # the intro the notes go under


@dataclass(frozen=True)
class Compacted:
    """A made summary and the list rewritten around it. ``status`` is ``insufficient`` when the
    rewritten list is still over the trigger (the no-loop rule then waits), and ``gain`` is
    false when the rewrite did not shrink the list at all (then it is not used). ``answers``
    holds each summary call's usage."""

    status: Literal["compacted", "insufficient"]
    messages: list[dict[str, Any]]
    tokens_after: int
    summary: str
    answers: tuple[Answer, ...]
    gain: bool

    @property
    def calls(self) -> int:
        return len(self.answers)

    @property
    def truncated(self) -> bool:
        """Whether a summary call came back longer than asked and was cut."""
        return any(a.truncated for a in self.answers)


async def compact(cplan: CompactionPlan, masked: Sequence[Mapping[str, Any]],
                  originals: Sequence[Mapping[str, Any]], scope: Scope, summarize: Summarizer,
                  summary_scope: Scope, offload: Offload,
                  riding: Sequence[Mapping[str, Any]] | None = None) -> Compacted:
    """Summarize what ``cplan`` covers and rewrite the ``masked`` list around the summary.

    ``originals`` aligns with ``masked`` index by index and holds the unmasked text the
    summarizer reads. ``summary_scope`` names the summary model and its window (whose tokenizer
    counts the prompts). ``riding`` (aligned with ``masked``) is the list the summary call sends
    on the cached prefix, by default ``masked``: the list as the previous request sent it when
    this one stepped masking (``proxy.context.stages.plan.sent_before``). Raises
    ``SummaryFailed`` (or the summarizer's own error) when no
    summary was made; the caller fails open.
    """
    if len(originals) != len(masked):
        raise ValueError("originals must align with the masked list one to one")
    window = summary_scope.window or cplan.window
    answers: list[Answer] = []
    riding_prompt: tuple[Prompt, int] | None = None
    if summary_scope.model == scope.model:  # the same model: the same cache
        riding_prompt = await _on_prefix(cplan, masked if riding is None else riding,
                                         originals, scope, summarize, window, offload, answers)
    if riding_prompt is not None:
        prompt, max_tokens = riding_prompt
        answer = await call(summarize, prompt, max_tokens, scope.counter, scope.model,
                            scope.tools or None)
        text = answer.text
        answers.append(answer)
    else:
        text, more = await summarize_messages(
            [originals[i] for i in cplan.summarize], counter=summary_scope.counter,
            model=summary_scope.model, summarize=summarize,
            max_tokens=cplan.summary_max_tokens, summary_window=window, offload=offload)
        answers += more
    if cplan.carried:
        text = with_carried(text, [originals[i] for i in cplan.carried])
    rewritten = apply_summary(masked, cplan, text, scope.policy)
    after = await offload(scope.count, rewritten)
    status: Literal["compacted", "insufficient"] = \
        "insufficient" if after > cplan.trigger_tokens else "compacted"
    return Compacted(status, rewritten, after, text, tuple(answers),
                     gain=after < cplan.tokens_before)


async def _on_prefix(cplan: CompactionPlan, masked: Sequence[Mapping[str, Any]],
                     originals: Sequence[Mapping[str, Any]], scope: Scope,
                     summarize: Summarizer, window: int, offload: Offload,
                     answers: list[Answer]) -> tuple[Prompt, int] | None:
    """The summary prompt on the cached prefix and its answer's ``max_tokens``, or ``None``
    when the prefix does not fit. Notes on the masked originals, when they are needed, are made
    first (``answers`` gets their calls). Without originals to add, a prefix that leaves the
    answer less than the summary's ``max_tokens`` (a large fixed part in a small window) still
    rides the cache when at least ``SHORTEST_ANSWER`` of it fits: a shorter summary on the
    cached prefix costs less than one from a transcript sent fresh.

    Notes are not made (``None``) when the room beside the prefix is less than the originals'
    share of the summary (their part of everything the summary reads): squeezed harder than
    the summary itself, they would drop what the summary keeps. Notes that came back cut are
    not used either (``None``, their calls stay in ``answers``): what was cut is lost."""
    counter, model, tools = scope.counter, scope.model, scope.tools
    best = cplan.summary_max_tokens
    results = masked_originals(masked, originals, cplan.summarize)
    full, room = await offload(prefix_prompt, masked, cplan.cut, restored_text(results),
                               counter, model, tools, window)
    if room >= best:
        return full, best
    if not results:
        return (full, room) if room >= SHORTEST_ANSWER * best else None
    _, bare = await offload(prefix_prompt, masked, cplan.cut, "", counter, model, tools, window)
    spare = bare - best
    if spare < max(MIN_NOTES, NOTES_FRAME + notes_share(best, bare - room, window - room)):
        return None
    notes, made = await summarize_messages(
        results, counter=counter, model=model, summarize=summarize,
        max_tokens=min(spare - NOTES_FRAME, best), summary_window=window, offload=offload)
    answers += made
    if any(a.truncated for a in made):
        return None
    prompt, room = await offload(prefix_prompt, masked, cplan.cut, notes, counter, model, tools,
                                 window)
    return (prompt, best) if room >= best else None


def notes_share(best: int, originals: int, everything: int) -> int:
    """The tokens notes on ``originals`` tokens of masked outputs need at the least: their share
    of a ``best``-token summary of ``everything`` the summary reads (the prefix and them)."""
    return -(-best * originals // max(everything, 1))
