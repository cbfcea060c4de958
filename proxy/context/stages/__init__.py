"""The two context stages as pure functions (SPEC sections 4 and 5).

Stages never touch the network, the store or metrics: the summarizer is injected, spills are
handed back for the caller to store, and every function returns new lists.
"""

from proxy.context.stages.compact import (
    CompactionPlan,
    CompactionResult,
    apply_summary,
    compact,
    plan_compaction,
    plan_compaction_async,
)
from proxy.context.stages.mask import MaskResult, Spill, mask_tool_outputs
from proxy.context.stages.plan import RewritePlan, plan_rewrite, plan_rewrite_sync
from proxy.context.stages.summary import Summarizer, SummaryFailed

__all__ = [
    "CompactionPlan",
    "CompactionResult",
    "MaskResult",
    "RewritePlan",
    "Spill",
    "Summarizer",
    "SummaryFailed",
    "apply_summary",
    "compact",
    "mask_tool_outputs",
    "plan_compaction",
    "plan_compaction_async",
    "plan_rewrite",
    "plan_rewrite_sync",
]
