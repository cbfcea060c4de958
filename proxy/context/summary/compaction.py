"""Compaction at the service edge: the summary call(s) for a plan, then the rewritten list.

The stages decide what to summarize (``proxy.context.stages``); this module pays for it. When
the summary model is the request's own model, the summary call rides the provider's prompt
cache: it sends the covered range as it is sent (a prefix of the conversation's last request)
with the same tools, then the original text of masked outputs in the covered range, newest
first, as far as a budget allows (``proxy.context.stages.reading``: what fits beside the prefix
and the summary, at most ``RESTORED_SHARE`` of the prefix), and the instruction last. What it
does not read is listed after the summary by spill id. Otherwise, when not even the prefix fits,
or another model summarizes, the covered range is summarized from a transcript of it as sent,
with the originals the same budget allows (in all at most one window), in pieces and then
merged when it is long. No compaction sends more uncached tokens than one window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.context.offload import Offload
from proxy.context.stages.compact import CompactionPlan, apply_summary
from proxy.context.stages.reading import (
    RESTORED_SHARE,
    Reading,
    choose,
    restored_text,
    unread_entries,
    with_unread,
)
from proxy.context.stages.scope import Scope
from proxy.context.stages.summary import Prompt, prefix_prompt, with_carried
from proxy.context.summary.summarizer import Answer, Summarizer, call, summarize_messages

SHORTEST_ANSWER = 0.5  # of the summary's max_tokens: the least a summary on the prefix may have
RESTORED_FRAME = 64  # tokens: the intro the restored originals go under, and their joints


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
    summarizer may read (within the budget; the rest is listed by spill id after the summary).
    ``summary_scope`` names the summary model and its window (whose tokenizer counts the
    prompts). ``riding`` (aligned with ``masked``) is the list the summary call sends on the
    cached prefix, by default ``masked``: the list as the previous request sent it when this one
    stepped masking (``proxy.context.stages.plan.sent_before``). Raises ``SummaryFailed`` (or
    the summarizer's own error) when no summary was made; the caller fails open.
    """
    if len(originals) != len(masked):
        raise ValueError("originals must align with the masked list one to one")
    window = summary_scope.window or cplan.window
    answers: list[Answer] = []
    riding_prompt: tuple[Prompt, int, Reading] | None = None
    if summary_scope.model == scope.model:  # the same model: the same cache
        riding_prompt = await offload(_on_prefix, cplan, masked if riding is None else riding,
                                      originals, scope, window)
    if riding_prompt is not None:
        prompt, max_tokens, reading = riding_prompt
        answer = await call(summarize, prompt, max_tokens, scope.counter, scope.model,
                            scope.tools or None)
        text = answer.text
        answers.append(answer)
    else:
        view, reading = await offload(_transcript_view, cplan, masked, originals,
                                      summary_scope, window)
        text, more = await summarize_messages(
            view, counter=summary_scope.counter, model=summary_scope.model,
            summarize=summarize, max_tokens=cplan.summary_max_tokens, summary_window=window,
            offload=offload)
        answers += more
    text = with_unread(text, reading.unread)
    if cplan.carried:
        text = with_carried(text, [originals[i] for i in cplan.carried])
    rewritten = apply_summary(masked, cplan, text, scope.policy)
    after = await offload(scope.count, rewritten)
    status: Literal["compacted", "insufficient"] = \
        "insufficient" if after > cplan.trigger_tokens else "compacted"
    return Compacted(status, rewritten, after, text, tuple(answers),
                     gain=after < cplan.tokens_before)


def _on_prefix(cplan: CompactionPlan, masked: Sequence[Mapping[str, Any]],
               originals: Sequence[Mapping[str, Any]], scope: Scope,
               window: int) -> tuple[Prompt, int, Reading] | None:
    """The summary prompt on the cached prefix, its answer's ``max_tokens`` and the originals
    it reads, or ``None`` when the prefix does not fit. The originals go after the prefix, the
    newest first, while they fit beside it and the summary and stay under ``RESTORED_SHARE``
    of it. A prefix that leaves the answer less than the summary's ``max_tokens`` (a large
    fixed part in a small window) still rides the cache, reading no original, when at least
    ``SHORTEST_ANSWER`` of it fits: a shorter summary on the cached prefix costs less than one
    from a transcript sent fresh."""
    counter, model, tools = scope.counter, scope.model, scope.tools
    best = cplan.summary_max_tokens
    bare, room = prefix_prompt(masked, cplan.cut, "", counter, model, tools, window)
    if room < SHORTEST_ANSWER * best:
        return None
    cached = counter.count_messages(masked[:cplan.cut], model, tools)
    budget = min(room - best, int(RESTORED_SHARE * cached)) - RESTORED_FRAME
    reading = choose(masked, originals, cplan.summarize, max(0, budget), counter, model)
    if not reading.read:
        return bare, min(room, best), reading
    restored = restored_text([originals[i] for i in reading.read])
    prompt, left = prefix_prompt(masked, cplan.cut, restored, counter, model, tools, window)
    if left >= best:
        return prompt, best, reading
    # Counted short (another rendering): read none rather than squeeze the summary.
    return bare, min(room, best), Reading((), unread_entries(masked, originals, cplan.summarize,
                                                             set()))


def _transcript_view(cplan: CompactionPlan, masked: Sequence[Mapping[str, Any]],
                     originals: Sequence[Mapping[str, Any]], summary_scope: Scope,
                     window: int) -> tuple[list[Mapping[str, Any]], Reading]:
    """What a summary made from a transcript reads: the covered range as it is sent, with the
    originals that fit the rest of one ``window`` (beside it and the summary) restored."""
    view = [masked[i] for i in cplan.summarize]
    used = summary_scope.counter.count_messages(view, summary_scope.model)
    budget = max(0, window - used - cplan.summary_max_tokens - RESTORED_FRAME)
    reading = choose(masked, originals, cplan.summarize, budget, summary_scope.counter,
                     summary_scope.model)
    read = set(reading.read)
    return [originals[i] if i in read else masked[i] for i in cplan.summarize], reading
