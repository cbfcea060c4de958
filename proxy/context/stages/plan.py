"""The planning half of the request path: count, mask, plan compaction, in one call.

``plan_rewrite`` is what the server calls for every managed request: it is pure (no network,
store or metrics) and runs in a worker thread whenever the transcript is large or the encoding is
not loaded yet, so planning a million-token request never stalls the event loop. The summary call
itself is ``proxy.context.stages.compact.compact``, given ``RewritePlan.compaction``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.offload import run_off_loop
from proxy.context.stages.compact import CompactionPlan, plan_compaction
from proxy.context.stages.mask import MaskResult, mask_tool_outputs
from proxy.context.tokens import TokenCounter
from proxy.context.window import compaction_window
from proxy.policy.model import Policy


@dataclass(frozen=True)
class RewritePlan:
    """Masking done, compaction planned (``None``: not triggered or disabled).

    ``mask.messages`` is the list to forward (or to compact); ``mask.tokens_before`` is the
    request as received, ``mask.tokens_after`` after masking.
    """

    window: int | None
    compaction_window: int
    mask: MaskResult
    compaction: CompactionPlan | None

    @property
    def tokens_before(self) -> int:
        return self.mask.tokens_before

    @property
    def tokens_after_mask(self) -> int:
        return self.mask.tokens_after


def plan_rewrite_sync(
    messages: Sequence[Mapping[str, Any]],
    policy: Policy,
    window: int | None,
    counter: TokenCounter,
    model: str,
    tools: Sequence[Any] | None = None,
    force: bool = False,
) -> RewritePlan:
    """Mask (SPEC section 4), then plan compaction (section 5) on the masked list; blocking."""
    masked = mask_tool_outputs(messages, policy, window, counter, model, tools)
    plan = plan_compaction(masked.messages, policy, window, counter, model, force, tools,
                           message_tokens=masked.message_tokens)
    return RewritePlan(window, compaction_window(window, policy), masked, plan)


async def plan_rewrite(
    messages: Sequence[Mapping[str, Any]],
    policy: Policy,
    window: int | None,
    counter: TokenCounter,
    model: str,
    tools: Sequence[Any] | None = None,
    force: bool = False,
) -> RewritePlan:
    """``plan_rewrite_sync`` off the event loop when the input is large; inline when small."""
    if counter.needs_offload(messages, model):
        return await run_off_loop(
            plan_rewrite_sync, messages, policy, window, counter, model, tools, force)
    return plan_rewrite_sync(messages, policy, window, counter, model, tools, force)
