"""Which masked originals a summary reads, within a budget, and the list of those it does not.

A compaction's summarizer should see what it summarizes, but the originals of masked outputs are
not in the provider's cached prefix: sent after it they are paid in full. So a compaction reads
them only within a budget (at most what fits beside the prefix, and a share of the prefix that
keeps the summary call mostly cached; in all, never more than one window), the newest first:
they tell the current state best. The others are listed after the summary by their
placeholders (tool, tokens, spill id), so every fact they hold stays readable from its spill
(``GET /v1/conversations/{id}/spills/{spill_id}``), and the list of an earlier summary the
compaction covers is carried into the new one: a rolling summary keeps every spill it named.

Pure: messages, indices and token counts in, one frozen ``Reading`` out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.stages.shared import is_result, is_summary, message_text
from proxy.context.tokens.counter import TokenCounter

UNREAD_HEADING = ("Earlier tool outputs and inputs this summary did not read; their originals "
                  "are kept as spills, readable by id:")
RESTORED_SHARE = 0.35  # originals sent beside the cached prefix, at most this share of it:
# the summary call stays over 70% cached (1 / 1.35 = 74%)
_ENTRY = re.compile(r"\[tool (?:output|input) cleared: [^\]\n]*spill [0-9a-f]{16}\]")


@dataclass(frozen=True)
class Reading:
    """``read``: the indices (ascending) of masked results whose originals the summary reads;
    ``unread``: the list entries (placeholders) of everything else it covers that was cleared,
    those an earlier summary listed first, each once."""

    read: tuple[int, ...]
    unread: tuple[str, ...]


def masked_results(masked: Sequence[Mapping[str, Any]],
                   originals: Sequence[Mapping[str, Any]],
                   summarize: Sequence[int]) -> list[int]:
    """The indices among ``summarize`` of tool results that masking replaced in ``masked``."""
    return [i for i in summarize if masked[i] is not originals[i] and is_result(originals[i])]


def restored_block(message: Mapping[str, Any]) -> str:
    """One original output as the summary reads it: under its call id."""
    return f"[{message.get('tool_call_id') or '?'}]\n{message_text(message)}"


def restored_text(results: Sequence[Mapping[str, Any]]) -> str:
    """The original outputs, each under its call id, as one text."""
    return "\n\n".join(restored_block(m) for m in results)


def choose(masked: Sequence[Mapping[str, Any]], originals: Sequence[Mapping[str, Any]],
           summarize: Sequence[int], budget: int, counter: TokenCounter,
           model: str) -> Reading:
    """The originals to read within ``budget`` tokens (newest first, each whole; one too large
    is passed over for older, smaller ones) and the entries of the rest."""
    read: list[int] = []
    left = budget
    for i in reversed(masked_results(masked, originals, summarize)):
        tokens = counter.text_tokens(restored_block(originals[i]), model) + 2
        if tokens <= left:
            read.append(i)
            left -= tokens
    return Reading(tuple(sorted(read)), unread_entries(masked, originals, summarize, set(read)))


def unread_entries(masked: Sequence[Mapping[str, Any]], originals: Sequence[Mapping[str, Any]],
                   summarize: Sequence[int], read: set[int]) -> tuple[str, ...]:
    """The placeholders of what ``summarize`` covers and the summary does not read: the lists
    of earlier summaries, then cleared inputs and outputs in order; each once."""
    entries: dict[str, None] = {}
    for i in summarize:
        m = masked[i]
        if is_summary(m):
            entries.update(dict.fromkeys(listed(message_text(m))))
        elif i not in read and m is not originals[i]:
            entries.update(dict.fromkeys(_ENTRY.findall(_cleared_text(m))))
    return tuple(entries)


def _cleared_text(message: Mapping[str, Any]) -> str:
    """Where a masked message carries its placeholders: its content and its calls' arguments
    (a cleared call's arguments are a JSON object holding the placeholder, which has no
    character JSON escapes)."""
    calls = message.get("tool_calls")
    args = [str(c.get("function", {}).get("arguments", "")) for c in calls
            if isinstance(c, Mapping)] if isinstance(calls, list) else []
    return "\n".join([message_text(message), *args])


def listed(text: str) -> list[str]:
    """The entries of the unread list in a summary's ``text`` (none when it has no list)."""
    at = text.find(UNREAD_HEADING)
    return _ENTRY.findall(text[at:]) if at >= 0 else []


def with_unread(summary: str, entries: Sequence[str]) -> str:
    """A summary's text followed by the unread list (unchanged when there is nothing to list)."""
    if not entries:
        return summary
    return f"{summary.rstrip()}\n\n{UNREAD_HEADING}\n" + "\n".join(f"- {e}" for e in entries)
