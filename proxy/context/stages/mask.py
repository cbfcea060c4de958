"""Stage 1, tool-output masking (SPEC section 4), as a pure function.

When masking is enabled and the window is known, tool results older than the
``masking.keep_recent`` newest ones have their content replaced by a placeholder naming the tool,
the tokens removed and the spill id, e.g. ``[tool output cleared: 12,431 tokens from read_file;
spill 3f9a…]``.

In steps (``masking.in_steps``, the default): the masked set only grows, and only when the
transcript *as it would be sent* (with the masking so far) crosses ``trigger_ratio`` × window;
a step then clears every maskable result older than the newest ``keep_recent`` at once, if it
frees at least ``min_free_ratio`` × window and pays for itself at the model's prices
(``pays``: what it rewrites against what the smaller prefix saves until the next rewrite;
``masking.priced: false`` skips that test). Between two steps every earlier message is sent
byte-identical, so a provider's prompt cache keeps serving the prefix. Whatever the prices, a
list that would pass compaction's trigger when compaction will not do the work steps, and if
clearing everything older than the newest ``keep_recent`` is not enough, the older of those
newest results yield too (never the newest tool group's).
The state is never stored: it is replayed from the message list itself, at each earlier request
point (the list before each assistant message is what the client sent for that answer), so
every replica and a restarted proxy mask the same set. With ``in_steps`` false the boundary moves
every turn once the client's transcript is over the trigger (fewest tokens, no cache).

Never masked: results of ``masking.exclude_tools`` and of the pinned tools
(``compaction.pinned_tools``), protected messages (``compaction.protected``), results that are
already placeholders, and results whose placeholder would not be shorter. Only the content of
result messages changes: roles, ``tool_call_id`` and every other message stay as they are, so the
output aligns index by index with the input and every call keeps its result.

The output depends only on the messages, the policy, the window and the model's encoding, so the
same input gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from proxy.context.adapters.cleared import cleared_arguments, input_placeholder
from proxy.context.stages.compact import trigger_tokens as compaction_trigger_tokens
from proxy.context.stages.inputs import Site, call_sites, clear_calls
from proxy.context.stages.pricing import CompactionPoint, Step, pays
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import (
    as_dicts,
    first_items,
    is_protected,
    is_result,
    result_tool_name,
    tool_names_by_call_id,
)
from proxy.policy.model import Policy

PLACEHOLDER_PREFIX = "[tool output cleared: "
SHORT_ID = 16  # hex digits of the spill id a placeholder shows: 64 bits, unique in a conversation
_ESTIMATE_ID = "0" * 64  # stands for a spill id when only the placeholder's length matters
_ESTIMATES: dict[tuple[str, str, int], int] = {}
_ESTIMATES_LIMIT = 50_000


@dataclass(frozen=True)
class Spill:
    """An original tool output that masking replaced, to be kept in the store.

    ``id`` is the sha256 hex digest of the content (``spill_id``), so the same output masked on
    every later turn is stored once. ``content`` is the original value (a string or a list of
    content parts); ``tokens`` counts it; ``index`` is its position in the message list.
    """

    id: str
    tool_name: str
    tool_call_id: str | None
    content: Any
    tokens: int
    index: int


@dataclass(frozen=True)
class MaskResult:
    """The masked list (a new list; unmasked entries are the input's own dicts) and what changed.

    ``message_tokens`` aligns with ``messages`` (overhead included); ``tokens_before`` and
    ``tokens_after`` are whole-request counts (reply priming and tools schemas included).
    ``triggered``: masking is in force for this request. ``first_change``: the index of the first
    message masked now that was sent verbatim at the previous request point (``None``: this
    request masks nothing new, so what it shares with the previous one is unchanged).
    ``inputs``: the call arguments cleared (``masking.clear_tool_inputs``), each a spill whose
    ``index`` is its assistant message's and whose ``content`` is the arguments text.
    """

    messages: list[dict[str, Any]]
    masked: list[Spill]
    tokens_freed: int
    tokens_before: int
    tokens_after: int
    message_tokens: list[int]
    triggered: bool
    first_change: int | None = None
    inputs: list[Spill] = field(default_factory=list)


def spill_id(content: Any) -> str:
    """Content address of a tool output: sha256 of its text (or canonical JSON for parts)."""
    text = content if isinstance(content, str) else json.dumps(
        content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def placeholder(tool_name: str, tokens: int, sid: str) -> str:
    """The text that replaces a masked tool output. It shows the spill id's first ``SHORT_ID``
    digits (the spills endpoint takes them): a placeholder is resent every turn, and the whole
    id would cost it twice the tokens."""
    return f"{PLACEHOLDER_PREFIX}{tokens:,} tokens from {tool_name}; spill {sid[:SHORT_ID]}]"


def is_placeholder(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(PLACEHOLDER_PREFIX)


def trigger_tokens(policy: Policy, window: int) -> float:
    """Masking runs when the transcript as sent has more tokens than this."""
    return policy.masking.trigger_ratio * window


def _placeholder_tokens(scope: Scope, name: str, tokens: int) -> int:
    """Tokens of a placeholder for a ``tokens``-token output of ``name`` (the spill id's own
    tokens vary by a few; decisions use this deterministic figure)."""
    key = (scope.counter.encoding_name(scope.model), name, tokens)
    found = _ESTIMATES.get(key)
    if found is None:
        if len(_ESTIMATES) >= _ESTIMATES_LIMIT:
            _ESTIMATES.clear()
        found = _ESTIMATES[key] = scope.counter.text_tokens(
            placeholder(name, tokens, _ESTIMATE_ID), scope.model)
    return found


@dataclass(frozen=True)
class _Result:
    index: int
    name: str
    saving: int  # tokens masking it frees (0: never masked)
    site: Site | None = None  # its call, when the call's arguments are cleared with it

    @property
    def frees(self) -> int:
        return self.saving + (self.site.saving if self.site else 0)


def _results(messages: Sequence[Mapping[str, Any]], scope: Scope,
             pairs: Sequence[tuple[int, int]]) -> list[_Result]:
    """Every tool result in order, with what masking it would free."""
    policy = scope.policy
    names = tool_names_by_call_id(messages)
    never = set(policy.masking.exclude_tools) | set(policy.compaction.pinned_tools)
    sites = call_sites(messages, scope, never)
    out: list[_Result] = []
    for i, msg in enumerate(messages):
        if not is_result(msg):
            continue
        content = msg.get("content")
        name = result_tool_name(msg, names)
        saving = 0
        if content and not is_placeholder(content) and name not in never and \
                not is_protected(msg, policy.compaction.protected, name):
            saving = max(0, pairs[i][1] - _placeholder_tokens(scope, name, pairs[i][1]))
        cid = msg.get("tool_call_id")
        out.append(_Result(i, name, saving, sites.get(cid) if isinstance(cid, str) else None))
    return out


def _boundaries(messages: Sequence[Mapping[str, Any]], scope: Scope, tokens: Sequence[int],
                results: Sequence[_Result], overhead: int,
                compaction_at: CompactionPoint | None) -> tuple[int, int]:
    """(results masked at the previous request point, results masked now): the masked set is
    the maskable ones among the first that many results."""
    mp, window = scope.policy.masking, scope.window or 0
    trigger = trigger_tokens(scope.policy, window)
    prefix = [0, *accumulate(tokens)]
    saved = [0, *accumulate(r.frees for r in results)]
    points = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    points.append(len(messages))
    starts = [r.index for r in results]
    boundary, previous, seen = 0, 0, 0
    for n, p in enumerate(points):
        while seen < len(results) and results[seen].index < p:
            seen += 1
        previous = boundary
        target = max(0, seen - mp.keep_recent)
        sent = prefix[p] - saved[boundary] + overhead
        if not mp.in_steps:  # the boundary moves with every request over the trigger
            boundary = target if prefix[p] + overhead > trigger else 0
        elif sent > trigger:
            growth = (prefix[points[n]] - prefix[points[0]]) / n if n else 0.0
            if compaction_at is None and sent + growth > compaction_trigger_tokens(scope):
                # Never over the window while masking could prevent it: compaction will not
                # do the work, so this step is taken whatever its price.
                newest = bisect_left(starts, points[n - 1]) if n else 0
                boundary = max(boundary, _yield_recent(scope, saved, boundary, target, newest,
                                                       sent + growth))
                continue
            freed = saved[target] - saved[boundary] if target > boundary else 0
            if freed < mp.min_free_ratio * window or not freed:
                continue
            kept = max(0.0, growth - saved[seen] / n) if n else 0.0  # what no step clears
            # The next step's first change is this one's first kept result: what follows it
            # is what each later step writes again, at least the newest results a session of
            # this size keeps (one step's luck with small ones does not make a regime).
            tail = prefix[p] - prefix[results[target].index] if target < len(results) else 0
            usual = max(tail, mp.keep_recent * saved[seen] / seen)
            step = Step(sent, freed, _rewritten(results, boundary, target, prefix,
                                                points[n - 1] if n else 0, freed), growth, kept,
                        round(usual), p, round(usual) - tail)
            # On a model that binds reasoning to its history a step would also cost the
            # reasoning after it, and compaction's one change costs it anyway: it waits
            # whenever compaction will do the work.
            waits = scope.bound and compaction_at is not None
            if not waits and (not mp.priced or pays(scope, step, compaction_at)):
                boundary = target
    return previous, boundary


def _rewritten(results: Sequence[_Result], boundary: int, target: int, prefix: Sequence[int],
               last: int, freed: int) -> int:
    """Tokens of the previous request (messages before ``last``) after the step's first
    change, without the ones it frees."""
    first = min((r.site.index if r.site else r.index) for r in results[boundary:target]
                if r.frees)
    return max(0, prefix[last] - prefix[min(first, last)] - freed)


def _yield_recent(scope: Scope, saved: Sequence[int], boundary: int, target: int,
                  newest: int, grown: float) -> int:
    """How many results to mask where compaction will not do the work (off, or its last summary
    unable to get under the trigger) and the list as sent, grown by a turn (``grown``), would
    pass compaction's trigger: every maskable result older than the newest ``keep_recent``,
    and when that is not enough, the older of those newest too, oldest first, as far as the
    list needs, but never a result of the newest tool group (``newest``: the results before
    it): the model acts on those next."""
    limit = compaction_trigger_tokens(scope)
    t = max(boundary, target)
    while t < newest and grown - (saved[t] - saved[boundary]) > limit:
        t += 1
    return t


def mask_tool_outputs(messages: Sequence[Mapping[str, Any]], scope: Scope,
                      pairs: Sequence[tuple[int, int]] | None = None,
                      compaction_at: CompactionPoint | None = None) -> MaskResult:
    """Apply SPEC section 4 to ``messages`` (never mutated); see the module docstring.

    ``pairs`` may pass the per-message (tokens, content tokens) already counted.
    ``compaction_at``: where compaction will run for this list (``None``: it will not do the
    work), which a step near it leaves the work to."""
    policy, window, counter, model = scope.policy, scope.window, scope.counter, scope.model
    if pairs is None:
        pairs = counter.token_pairs(messages, model)
    tokens = first_items(pairs)
    overhead = scope.overhead()
    before = sum(tokens) + overhead
    out = as_dicts(messages)
    if not policy.masking.enabled or not window or before <= trigger_tokens(policy, window):
        # No request point was over the trigger either: the sent prefix only grows.
        return MaskResult(out, [], 0, before, before, tokens, triggered=False)
    results = _results(messages, scope, pairs)
    previous, boundary = _boundaries(messages, scope, tokens, results, overhead, compaction_at)
    new_tokens = list(tokens)
    spills: list[Spill] = []
    changes: list[int] = []  # indices changed now that the previous request point sent as-is
    for k, r in enumerate(results[:boundary]):
        if not r.saving:
            continue
        msg = messages[r.index]
        content, ct = msg.get("content"), pairs[r.index][1]
        sid = spill_id(content)
        text = placeholder(r.name, ct, sid)
        cid = msg.get("tool_call_id")
        spills.append(Spill(sid, r.name, cid if isinstance(cid, str) else None, content, ct,
                            r.index))
        out[r.index] = {**msg, "content": text}
        # Only the content changes, so the message's other tokens carry over unchanged.
        new_tokens[r.index] = tokens[r.index] - ct + counter.text_tokens(text, model)
        if k >= previous:
            changes.append(r.index)
    inputs = _clear_inputs(messages, scope, results[:boundary], out, new_tokens)
    changes += [s.index for k, s in inputs if k >= previous]
    after = sum(new_tokens) + overhead
    return MaskResult(out, spills, before - after, before, after, new_tokens,
                      triggered=boundary > 0 or after > trigger_tokens(policy, window),
                      first_change=min(changes, default=None),
                      inputs=[s for _, s in inputs])


def _clear_inputs(messages: Sequence[Mapping[str, Any]], scope: Scope,
                  results: Sequence[_Result], out: list[dict[str, Any]],
                  new_tokens: list[int]) -> list[tuple[int, Spill]]:
    """Clear the arguments of the calls of ``results`` that have a site, in ``out`` (their
    assistant messages copied) and ``new_tokens``; (result number, spill) of each."""
    by_message: dict[int, dict[int, str]] = {}
    found: list[tuple[int, Spill]] = []
    for k, r in enumerate(results):
        if r.site is None:
            continue
        call = messages[r.site.index]["tool_calls"][r.site.position]
        args = call["function"]["arguments"]
        sid = spill_id(args)
        text = cleared_arguments(input_placeholder(r.name, r.site.tokens, sid, SHORT_ID))
        by_message.setdefault(r.site.index, {})[r.site.position] = text
        found.append((k, Spill(sid, r.name, call["id"], args, r.site.tokens, r.site.index)))
    for i, cleared in by_message.items():
        out[i] = clear_calls(out[i], cleared)
        new_tokens[i] = scope.counter.message_tokens(out[i], scope.model)
    return found
