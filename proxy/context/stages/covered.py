"""What a compaction's summary covers (SPEC section 6, dividers): the client's messages it
replaces (an index range) and the tool outputs among them, each by tool name with its tokens and
a spill of its original (content-addressed like masking's, so an output masked earlier has the
same id), so nothing a summary removes is lost unseen. Pure and synchronous."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.stages.mask import Spill, spill_id
from proxy.context.stages.shared import (
    is_result,
    is_summary,
    message_text,
    result_tool_name,
    tool_names_by_call_id,
)
from proxy.context.tokens.counter import TokenCounter


@dataclass(frozen=True)
class Covered:
    """Client message indices ``first`` to ``end`` (exclusive) went into the summary (``0, 0``:
    none new); ``outputs`` are the tool results among them, as spills."""

    first: int
    end: int
    outputs: tuple[Spill, ...]

    def turns(self) -> list[int]:
        """The index range as stored and shown: [first, end)."""
        return [self.first, self.end]

    def listed(self) -> list[dict[str, Any]]:
        """The outputs as the divider lists them: tool name, tokens, spill id."""
        return [{"tool": s.tool_name, "tokens": s.tokens, "spill_id": s.id}
                for s in self.outputs]


def covered(view: Sequence[dict[str, Any]], origin: Sequence[int], summarize: Sequence[int],
            counter: TokenCounter, model: str) -> Covered:
    """What summarizing ``summarize`` (indices into ``view``, the client's messages with any
    earlier summary in place, unmasked; ``origin`` maps each to its client index, -1 for the
    summary) covers. An earlier summary is not counted (its own divider listed what it took)."""
    names = tool_names_by_call_id(view)
    taken = [i for i in summarize if origin[i] >= 0 and not is_summary(view[i])]
    outputs = tuple(
        Spill(spill_id(view[i].get("content")), result_tool_name(view[i], names),
              view[i].get("tool_call_id"), view[i].get("content"),
              counter.text_tokens(message_text(view[i]), model), origin[i])
        for i in taken if is_result(view[i]))
    if not taken:
        return Covered(0, 0, outputs)
    return Covered(min(origin[i] for i in taken), max(origin[i] for i in taken) + 1, outputs)
