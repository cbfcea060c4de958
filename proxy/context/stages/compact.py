"""Stage 2, compaction (SPEC section 5): plan a cut, summarize what is before it, rewrite.

``plan_compaction`` decides and ``apply_summary`` rebuilds the list around a summary; the summary
call itself happens at the service edge (``proxy.context.summary.compaction``), so the live
path can store a plan with its summary and apply it again to later requests.

What is before the cut and always kept verbatim: every system/developer message, the first user
message (``compaction.protect_first_user``), protected messages (``compaction.protected``), and
the newest call of each pinned tool with its results. Each is kept with its whole tool group, so
no call loses a result. A summary from an earlier compaction (recognised by its marker, whatever
its role) is never kept: it is summarized again with the rest (rolling summary).

The trigger is ``trigger_ratio`` × window, raised when the fixed part (what a compaction keeps
whatever happens) is so large that a compaction would leave less than a keep window of growth
under it (``lasting_trigger``): the compacted list then lasts several turns instead of one.

The cut: the keep window is the newest messages that fit in ``keep_ratio`` × window tokens, and
always at least the newest message with its whole tool group and the newest tool group that holds
calls (with all its results); the cut moves earlier to the start of a tool group, so no call is
split from its results. The last
user message and everything after it stay whole when that leaves at least a keep window of room
under the trigger (estimating the summary at its ``max_tokens``). When it does not (an agent's
single task with hundreds of tool turns), the last user message is kept verbatim like the first
one, and the cut falls at the tool-group boundary the keep window gives, so the session compacts.
A forced (manual) compaction is a request to free context now, so it always cuts by the keep
window and keeps only the last user message itself verbatim.

The rewritten list: the preserved messages before the cut in order, the summary message, then
``messages[cut:]``. It never has more tokens than the input: a summary that does not shrink the
list is not used (status ``insufficient``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import (
    as_dicts,
    called_tools,
    format_summary,
    group_bounds,
    is_protected,
    is_result,
    is_summary,
    result_tool_name,
    tool_names_by_call_id,
)
from proxy.policy.model import Policy

SUMMARY_FRAME_TOKENS = 64  # the marker and notice around a summary's text
LASTING_CAP = 0.95  # of the window: the highest a large fixed part raises the trigger, and
# the most a request may fill while a compaction that would not last waits
GROWTH_TURNS = 4  # the newest turns whose mean size is a turn's growth
LASTING_TURNS = 2  # turns of growth a compaction must leave room for under its trigger


@dataclass(frozen=True)
class CompactionPlan:
    """Where to cut and what to do with each message before the cut.

    ``messages[:cut]`` is the covered prefix: ``preserved`` indices stay verbatim, ``summarize``
    indices go to the summarizer. ``keep_start`` (≥ ``cut``) starts the token-based keep window.
    ``summary_max_tokens`` is min(summary_ratio × window, summary_max_tokens).
    """

    cut: int
    preserved: tuple[int, ...]
    summarize: tuple[int, ...]
    keep_start: int
    window: int
    tokens_before: int
    trigger_tokens: int
    keep_budget: int
    summary_max_tokens: int
    forced: bool = False
    new_messages: int = 0  # summarized messages that are not earlier summaries
    new_tokens: int = 0  # their tokens: how much new there is to summarize
    carried: tuple[int, ...] = ()  # covered messages the summary message carries verbatim
    end: int = 0  # where the covered part ends, when past ``cut`` (messages carried)

    @property
    def covers(self) -> int:
        """How many leading messages the summary message stands for (``cut``, or ``end`` when
        it carries the messages after the cut)."""
        return max(self.cut, self.end)

    @property
    def summarizable(self) -> bool:
        """Whether anything new (not just an earlier summary) would be summarized."""
        return self.new_messages > 0


def trigger_tokens(scope: Scope) -> int:
    """Compaction runs when the transcript (after masking) has more tokens than this."""
    return int(scope.policy.compaction.trigger_ratio * scope.compaction_window)


def summary_budget(scope: Scope) -> int:
    """A summary's ``max_tokens``: ``summary_ratio`` × window, capped at
    ``summary_max_tokens``."""
    cp = scope.policy.compaction
    return min(int(cp.summary_ratio * scope.compaction_window), cp.summary_max_tokens)


def lasting_trigger(scope: Scope, fixed: int, summary_max: int) -> int:
    """The trigger for a list whose fixed part (tools, system and developer messages, the first
    user message, protected and pinned messages) has ``fixed`` tokens: ``trigger_ratio`` ×
    window, raised when a compaction would leave too little room under it to last (the fixed
    part, a summary and a keep window, plus a keep window of growth), never above 95% of the
    window. Without the rise a large fixed part (a coding agent's 20k tokens of system and tools
    in a 32k window) makes every turn cross the trigger again right after its compaction."""
    w = scope.compaction_window
    budget = int(scope.policy.compaction.keep_ratio * w)
    lasting = fixed + summary_max + SUMMARY_FRAME_TOKENS + 2 * budget
    return max(trigger_tokens(scope), min(lasting, int(LASTING_CAP * w)))


def fixed_tokens(messages: Sequence[Mapping[str, Any]], scope: Scope, tokens: Sequence[int],
                 bounds: list[tuple[int, int]] | None = None,
                 kept: set[int] | None = None) -> int:
    """What a compaction keeps whatever happens: the request's overhead (tools) and the tool
    groups holding system and developer messages, the first user message, protected and
    pinned messages (``tokens`` aligns with ``messages``)."""
    bounds = group_bounds(messages) if bounds is None else bounds
    kept = _preserved_groups(messages, scope.policy, bounds) if kept is None else kept
    return scope.overhead() + sum(tokens[i] for g in kept for i in range(*bounds[g]))


def _newest_calls(messages: Sequence[Mapping[str, Any]], bounds: list[tuple[int, int]]) -> int:
    """Where the newest tool group that holds calls starts (the list's end when none does)."""
    for start, _ in reversed(bounds):
        if called_tools(messages[start]):
            return start
    return len(messages)


def _preserved_groups(messages: Sequence[Mapping[str, Any]], policy: Policy,
                      bounds: list[tuple[int, int]]) -> set[int]:
    """Indices (into ``bounds``) of the tool groups holding a message that must be kept."""
    cp = policy.compaction
    names = tool_names_by_call_id(messages)
    keep: set[int] = set()
    first_user_seen = not cp.protect_first_user
    pinned = set(cp.pinned_tools)
    for g in range(len(bounds) - 1, -1, -1):  # newest first, for the pinned tools
        found = pinned.intersection(called_tools(messages[bounds[g][0]]))
        if found:
            keep.add(g)
            pinned -= found
    for g, (start, end) in enumerate(bounds):
        for i in range(start, end):
            m = messages[i]
            if is_summary(m):
                continue
            role = m.get("role")
            tool = result_tool_name(m, names) if is_result(m) else None
            if role in ("system", "developer") or is_protected(m, cp.protected, tool):
                keep.add(g)
            elif role == "user" and not first_user_seen:
                first_user_seen = True
                keep.add(g)
    return keep


def keep_window_start(tokens: Sequence[int], budget: float, end: int | None = None) -> int:
    """Where the keep window of ``tokens[:end]`` starts: its newest messages whose tokens fit
    in ``budget`` (``end``: the whole list when None)."""
    start, used = len(tokens) if end is None else end, 0
    while start > 0 and used + tokens[start - 1] <= budget:
        start -= 1
        used += tokens[start]
    return start


def _cut(messages: Sequence[Mapping[str, Any]], bounds: list[tuple[int, int]],
         group_of: list[int], keep_start: int) -> int:
    """The cut of a keep window starting at ``keep_start``. The newest tool group (or message)
    always stays: it is what the model acts on next, even when it alone is larger than the keep
    budget; so does the newest group that holds calls (a note from the user after large
    results must not leave the results behind)."""
    return min(bounds[group_of[min(keep_start, len(messages) - 1)]][0],
               _newest_calls(messages, bounds))


def _ahead_cut(bounds: list[tuple[int, int]], group_of: list[int], keep_start: int) -> int:
    """The cut of a plan made ahead: at the start of the tool group ``keep_start`` falls in,
    or after the whole list when the keep window is empty."""
    return bounds[group_of[keep_start]][0] if keep_start < len(group_of) else len(group_of)


def plan_compaction(
    messages: Sequence[Mapping[str, Any]],
    scope: Scope,
    *,
    force: bool = False,
    message_tokens: Sequence[int] | None = None,
    lasting: bool = True,
    ahead: bool = False,
) -> CompactionPlan | None:
    """The compaction plan, or ``None`` when compaction is disabled or not triggered.

    The scope's window may be unknown (``None``): the fallback window applies.
    ``force`` (manual compaction) skips the trigger, not ``compaction.enabled``.
    ``message_tokens`` may pass counts already made (e.g. ``MaskResult.message_tokens``).
    A compaction that would not last (``_lasts``) waits while the request fills at most
    ``LASTING_CAP`` of the window, unless ``lasting`` is false.
    ``ahead``: the plan of a summary applied to a later request of the conversation (prepared
    in the background): the newer messages that request brings stay verbatim after the cut and
    hold its newest tool group, so the cut follows the keep window alone and may cover the
    whole list.
    """
    policy = scope.policy
    cp = policy.compaction
    if not cp.enabled or not messages:
        return None
    w = scope.compaction_window
    tokens = list(message_tokens) if message_tokens is not None else \
        scope.counter.message_token_list(messages, scope.model)
    overhead = scope.overhead()
    total = sum(tokens) + overhead
    if not force and total <= trigger_tokens(scope):
        return None
    bounds = group_bounds(messages)
    group_of = [g for g, (s, e) in enumerate(bounds) for _ in range(s, e)]
    kept = _preserved_groups(messages, policy, bounds)
    budget = int(cp.keep_ratio * w)
    summary_max = summary_budget(scope)
    trigger = lasting_trigger(scope, fixed_tokens(messages, scope, tokens, bounds, kept),
                              summary_max)
    if not force and total <= trigger:
        return None
    keep_start = keep_window_start(tokens, budget)
    cut = _ahead_cut(bounds, group_of, keep_start) if ahead else \
        _cut(messages, bounds, group_of, keep_start)

    def kept_before(end: int) -> int:
        return sum(tokens[i] for g in kept for i in range(*bounds[g]) if i < end)

    last_user = next((i for i in range(len(messages) - 1, -1, -1)
                      if messages[i].get("role") == "user" and not is_summary(messages[i])), None)
    if last_user is not None and last_user < cut:
        whole_turn = kept_before(last_user) + summary_max + SUMMARY_FRAME_TOKENS + overhead \
            + sum(tokens[last_user:])
        if not force and whole_turn <= trigger - budget:
            cut = bounds[group_of[last_user]][0]
        else:
            kept.add(group_of[last_user])
    preserved = tuple(i for g in sorted(kept) for i in range(*bounds[g]) if i < cut)
    if lasting and not force and total <= LASTING_CAP * w and not _lasts(
            sum(tokens[i] for i in preserved) + summary_max + SUMMARY_FRAME_TOKENS + overhead
            + sum(tokens[cut:]), _growth(messages, tokens), trigger):
        return None
    taken = set(preserved)
    summarize = tuple(i for i in range(cut) if i not in taken)
    new = [i for i in summarize if not is_summary(messages[i])]
    return CompactionPlan(
        cut=cut, preserved=preserved, summarize=summarize, keep_start=max(keep_start, cut),
        window=w, tokens_before=total, trigger_tokens=trigger, keep_budget=budget,
        summary_max_tokens=summary_max, forced=force,
        new_messages=len(new), new_tokens=sum(tokens[i] for i in new),
    )


def _lasts(after: int, growth: float, trigger: int) -> bool:
    """Whether a compaction whose rewritten list has ``after`` tokens (its summary counted at
    ``max_tokens``) leaves room under ``trigger`` for ``LASTING_TURNS`` turns of ``growth``.
    One that does not would make the next turn, or the one after, compact again; while the
    request fits the window it waits, so that two consecutive turns summarize only when the
    second would not fit without it."""
    return after + LASTING_TURNS * growth <= trigger


def _growth(messages: Sequence[Mapping[str, Any]], tokens: Sequence[int]) -> float:
    """Tokens a turn adds, from the list's newest ``GROWTH_TURNS`` turns (each an assistant
    message and what follows it up to the next)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not starts:
        return 0.0
    newest = starts[-GROWTH_TURNS:]
    return sum(tokens[newest[0]:]) / len(newest)


def summary_message(summary_text: str, policy: Policy) -> dict[str, Any]:
    """The message that stands for the covered prefix (role per ``compaction.summary_role``)."""
    return {"role": policy.compaction.summary_role, "content": format_summary(summary_text)}


def carry_to_end(plan: CompactionPlan, messages: Sequence[Mapping[str, Any]],
                 tokens: Sequence[int], overhead: int) -> CompactionPlan:
    """The plan on a model that binds reasoning to its history: nothing made before the
    compaction may stay after its summary (its reasoning would no longer match what precedes
    it), so the summary covers the whole list (``end``). The newest messages that fit under
    the trigger beside the preserved ones and the summary (``tokens`` aligns with
    ``messages``; ``overhead``: the request's tools and priming) are carried verbatim inside
    the summary message (``carried``), after the summary's text; the cut moves to the first of
    them, so the older messages of the keep window are summarized, on the cached prefix like
    the rest. Preserved assistant turns and tool results (pinned tools) are summarized too,
    since their reasoning would move; system and developer messages (what the proxy does not
    read) stay verbatim before the summary. The list sent then ends with the summary, so the
    model starts a new turn whose reasoning is bound to the rewritten list."""
    n = len(messages)
    def opaque(i: int) -> bool:
        return messages[i].get("role") in ("system", "developer")
    def turn(i: int) -> bool:
        return messages[i].get("role") in ("assistant", "tool")
    keep = tuple(i for i in (*plan.preserved, *(i for i in range(plan.cut, n) if opaque(i)))
                 if not turn(i))
    room = plan.trigger_tokens - overhead - sum(tokens[i] for i in keep) - \
        plan.summary_max_tokens - 2 * SUMMARY_FRAME_TOKENS
    cut = n
    while cut > plan.cut and (opaque(cut - 1) or room >= tokens[cut - 1]):
        room -= 0 if opaque(cut - 1) else tokens[cut - 1]
        cut -= 1
    starts = {start for start, _ in group_bounds(messages)}
    while cut < n and cut not in starts:  # a call stays with its results on the cached prefix
        cut += 1
    carried = tuple(i for i in range(cut, n) if not opaque(i))
    summarize = {*plan.summarize, *(i for i in plan.preserved if turn(i)),
                 *(i for i in range(plan.cut, cut) if not opaque(i))}
    new = [i for i in (*summarize, *carried) if not is_summary(messages[i])]
    return replace(plan, cut=cut, end=n, preserved=keep, summarize=tuple(sorted(summarize)),
                   keep_start=n, carried=carried, new_messages=len(new),
                   new_tokens=sum(tokens[i] for i in new))


def apply_summary(
    messages: Sequence[Mapping[str, Any]], plan: CompactionPlan, summary_text: str,
    policy: Policy,
) -> list[dict[str, Any]]:
    """The rewritten list: preserved messages, the summary, ``messages[plan.covers:]``.

    ``messages`` may have grown past the request the plan was made for (new turns appended);
    its first ``plan.covers`` messages must be the ones the plan covered (the caller checks that,
    e.g. by the stored prefix hash).
    """
    if len(messages) < plan.covers:
        raise ValueError(f"plan covers {plan.covers} messages, list has {len(messages)}")
    msgs = as_dicts(messages)
    return [*(msgs[i] for i in plan.preserved), summary_message(summary_text, policy),
            *msgs[plan.covers:]]
