"""The planning half of the managed path, pure: reuse, masking and the compaction decision.

``plan`` takes the client's messages, the scope and the conversation's stored compaction (the
"prior") and decides everything that needs no I/O: whether the prior's covered prefix is still
the client's prefix (then its summary stands in for it, with no new call), what masking
replaces, whether compaction triggers, where it cuts and which client messages the new summary
would cover. The service runs it off the loop for large inputs and
does the I/O the plan asks for (spills, the summary call, the divider).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from proxy.context.stages.compact import (
    CompactionPlan,
    carry_to_end,
    plan_compaction,
    summary_message,
)
from proxy.context.stages.compact import trigger_tokens as compaction_trigger
from proxy.context.stages.mask import MaskResult, mask_tool_outputs
from proxy.context.stages.mask import trigger_tokens as mask_trigger
from proxy.context.stages.pricing import CompactionPoint
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import as_dicts, first_items, prefix_hash
from proxy.policy.model import Policy

Action = Literal["forward", "summarize", "insufficient"]


class Prior(Protocol):
    """A stored compaction, as the planner reads it (client indices)."""

    @property
    def prefix_hash(self) -> str: ...
    @property
    def covered(self) -> int: ...
    @property
    def preserved(self) -> tuple[int, ...]: ...
    @property
    def summary(self) -> str: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True)
class View:
    """The client's messages with the prior applied (or not): ``origin`` maps each message to
    its client index, -1 for the summary message."""

    messages: list[dict[str, Any]]
    origin: tuple[int, ...]
    prior: Prior | None


@dataclass(frozen=True)
class Plan:
    """What to do with one request.

    ``action``: ``forward`` (send the view, masked), ``summarize`` (make a summary of the
    client's first ``covered`` messages, keeping ``preserved`` verbatim) or ``insufficient``
    (compaction triggered but cannot help: forward).
    ``tokens_before`` counts the request as the client sent it.
    """

    view: View
    mask: MaskResult
    compaction: CompactionPlan | None
    tokens_before: int
    action: Action
    covered: int = 0
    preserved: tuple[int, ...] = ()
    previous: int = 0  # messages the previous request point sent (the list before the last
    # assistant message): what a provider's prompt cache may still hold
    kept: int = 0  # tokens at the start (tools, then messages) that request sent the same
    compaction_at: CompactionPoint | None = None  # what masking weighed its steps against

    @property
    def tokens_after_mask(self) -> int:
        return self.mask.tokens_after

    @property
    def rewrote(self) -> bool:
        """Whether masking changed a message the previous request point sent (a step)."""
        first = self.mask.first_change
        return first is not None and first < self.previous

    @property
    def changed(self) -> bool:
        """Whether the outgoing list differs from the client's."""
        return self.view.prior is not None or bool(self.mask.masked or self.mask.inputs)


def apply_prior(messages: Sequence[Mapping[str, Any]], prior: Prior | None, policy: Policy,
                verified: bool = False) -> View:
    """The view: the prior's summary in place of its covered prefix when that prefix is
    exactly the client's, else the client's messages as they are. ``verified``: the caller
    knows the prefix matches (it checked these same leading messages before)."""
    n = len(messages)
    msgs = [m if isinstance(m, dict) else dict(m) for m in messages]
    if prior is not None and prior.covered <= n and \
            (verified or prefix_hash(messages, prior.covered) == prior.prefix_hash):
        return View([*(msgs[i] for i in prior.preserved), summary_message(prior.summary, policy),
                     *msgs[prior.covered:]],
                    (*prior.preserved, -1, *range(prior.covered, n)), prior)
    return View(msgs, tuple(range(n)), None)


def plan(messages: Sequence[Mapping[str, Any]], scope: Scope, prior: Prior | None = None,
         force: bool = False, pairs: Sequence[tuple[int, int]] | None = None,
         verified: tuple[str, int] | None = None, lasting: bool = True,
         ahead: bool = False) -> Plan:
    """Plan one request (see the module docstring). ``force``: a manual compaction, which
    skips the trigger and the no-loop wait. ``pairs``: the per-message (tokens, content
    tokens) of ``messages`` when already counted; ``verified``: a (prefix hash, covered) known
    to match ``messages``. ``lasting`` false: a compaction that would not last does not wait
    (``plan_compaction``; a summary prepared early plans at a lowered trigger); ``ahead``: the
    plan is for a summary applied to a later request (``plan_compaction``)."""
    if pairs is None:
        pairs = scope.counter.token_pairs(messages, scope.model)
    if prior is None and not force:
        quiet = _untouched(messages, scope, pairs)
        if quiet is not None:
            return quiet
    known = prior is not None and verified == (prior.prefix_hash, prior.covered)
    view = apply_prior(messages, prior, scope.policy, known)
    view_pairs = pairs if view.prior is None else \
        [pairs[o] if o >= 0 else scope.counter.token_pairs([view.messages[i]], scope.model)[0]
         for i, o in enumerate(view.origin)]
    compaction_at = _compaction_at(view, scope, first_items(view_pairs))
    mask = mask_tool_outputs(view.messages, scope, view_pairs, compaction_at)
    cplan = plan_compaction(mask.messages, scope, force=force, message_tokens=mask.message_tokens,
                            lasting=lasting, ahead=ahead)
    before = sum(first_items(pairs)) + scope.overhead() if view.prior is not None \
        else mask.tokens_before
    if cplan is not None and scope.bound:
        cplan = carry_to_end(cplan, mask.messages, mask.message_tokens, scope.overhead())
    action = _decide(view, cplan, force, scope)
    previous = previous_point(view.messages)
    end = previous if mask.first_change is None else min(previous, mask.first_change)
    kept = kept_tokens(scope, mask.message_tokens, end) if previous else 0
    if action != "summarize":
        return Plan(view, mask, cplan, before, action, previous=previous, kept=kept,
                    compaction_at=compaction_at)
    assert cplan is not None
    origin = view.origin
    covered = origin[cplan.covers] if cplan.covers < len(origin) else len(messages)
    preserved = tuple(origin[i] for i in cplan.preserved if origin[i] >= 0)
    return Plan(view, mask, cplan, before, action, covered, preserved, previous, kept,
                compaction_at)


def _compaction_at(view: View, scope: Scope, tokens: Sequence[int]) -> CompactionPoint | None:
    """Where compaction runs for the view, for masking to weigh a step against; ``None`` when
    compaction will not do the work: disabled, or its last summary could not get the list
    under the trigger."""
    if not scope.policy.compaction.enabled or (view.prior is not None and
                                               view.prior.status == "insufficient"):
        return None
    return CompactionPoint(view.messages, scope, tokens)


def _untouched(messages: Sequence[Mapping[str, Any]], scope: Scope,
               pairs: Sequence[tuple[int, int]]) -> Plan | None:
    """The plan of a request under both triggers with no stored compaction (most requests):
    forward it as it is; ``None`` when a stage may run."""
    tokens = first_items(pairs)
    before = sum(tokens) + scope.overhead()
    policy = scope.policy
    if policy.masking.enabled and scope.window and before > mask_trigger(policy, scope.window):
        return None
    if policy.compaction.enabled and before > compaction_trigger(scope):
        return None
    msgs = as_dicts(messages)
    mask = MaskResult(msgs, [], 0, before, before, tokens, triggered=False)
    previous = previous_point(msgs)
    return Plan(View(msgs, tuple(range(len(msgs))), None), mask, None, before, "forward",
                previous=previous, kept=kept_tokens(scope, tokens, previous) if previous else 0)


def sent_before(p: Plan, scope: Scope) -> list[dict[str, Any]]:
    """The list as the conversation's previous request sent its start: the view masked as it
    was at that request point (masking replays from the list itself), then the newer messages
    as this request masks them. What a summary call that rides the provider's cache sends:
    when this request's masking stepped, its own list differs from the cached one from the
    step's first change on."""
    if not p.rewrote:
        return p.mask.messages
    earlier = mask_tool_outputs(p.view.messages[:p.previous], scope,
                                compaction_at=p.compaction_at)
    return [*earlier.messages, *p.mask.messages[p.previous:]]


def previous_point(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many messages the previous request sent: those before the last assistant message
    (its answer); 0 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return 0


def kept_tokens(scope: Scope, message_tokens: Sequence[int], n: int) -> int:
    """Tokens of a prompt's start: the tools schemas (rendered first), then ``n`` messages."""
    return scope.tools_tokens + sum(message_tokens[:n])


def _decide(view: View, cplan: CompactionPlan | None, force: bool, scope: Scope) -> Action:
    if cplan is None:
        return "forward"
    summary_at = len(view.prior.preserved) if view.prior is not None else -1
    if not cplan.summarizable or cplan.cut <= summary_at:
        return "insufficient"  # nothing new before the cut: only the summary would be redone
    last = view.prior
    if not force and last is not None and last.status == "insufficient" and \
            cplan.new_tokens < scope.policy.masking.min_free_ratio * cplan.window:
        # No loops: the last summary could not get under the trigger. Everything the summary
        # would take beyond it (the earlier summary itself aside) is new since then: wait until
        # that is worth a summary call, the same threshold a masking step must free.
        return "insufficient"
    return "summarize"
