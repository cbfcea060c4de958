"""Stage 1, tool-output masking (SPEC section 4), as a pure function.

When masking is enabled, the window is known and the transcript exceeds
``masking.trigger_ratio`` × window, every tool result older than the ``masking.keep_recent``
newest ones has its content replaced by a placeholder naming the tool, the tokens removed and the
spill id, e.g. ``[tool output cleared: 12,431 tokens from read_file; spill 3f9a…]``.

Never masked: results of ``masking.exclude_tools`` and of the pinned tools
(``compaction.pinned_tools``), protected messages (``compaction.protected``), results that are
already placeholders, and results whose placeholder would not be shorter. Only the content of
result messages changes: roles, ``tool_call_id`` and every other message stay as they are, so the
output aligns index by index with the input and every call keeps its result.

The output depends only on the messages, the policy, the window and the model's encoding, so the
same input gives the same bytes and upstream prompt caches keep hitting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.stages.messages import (
    as_dicts,
    is_protected,
    is_result,
    result_tool_name,
    tool_names_by_call_id,
)
from proxy.context.stages.scope import Scope
from proxy.policy.model import Policy

PLACEHOLDER_PREFIX = "[tool output cleared: "


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
    ``triggered`` says whether the stage ran (enabled, window known, over the trigger).
    """

    messages: list[dict[str, Any]]
    masked: list[Spill]
    tokens_freed: int
    tokens_before: int
    tokens_after: int
    message_tokens: list[int]
    triggered: bool


def spill_id(content: Any) -> str:
    """Content address of a tool output: sha256 of its text (or canonical JSON for parts)."""
    text = content if isinstance(content, str) else json.dumps(
        content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def placeholder(tool_name: str, tokens: int, sid: str) -> str:
    """The text that replaces a masked tool output."""
    return f"{PLACEHOLDER_PREFIX}{tokens:,} tokens from {tool_name}; spill {sid}]"


def is_placeholder(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(PLACEHOLDER_PREFIX)


def trigger_tokens(policy: Policy, window: int) -> float:
    """Masking runs when the transcript has more tokens than this."""
    return policy.masking.trigger_ratio * window


def mask_tool_outputs(messages: Sequence[Mapping[str, Any]], scope: Scope,
                      pairs: Sequence[tuple[int, int]] | None = None) -> MaskResult:
    """Apply SPEC section 4 to ``messages`` (never mutated); see the module docstring.

    ``pairs`` may pass the per-message (tokens, content tokens) already counted."""
    policy, window, counter, model = scope.policy, scope.window, scope.counter, scope.model
    if pairs is None:
        pairs = counter.token_pairs(messages, model)
    tokens = [t for t, _ in pairs]
    overhead = scope.overhead()
    before = sum(tokens) + overhead
    out = as_dicts(messages)
    mp = policy.masking
    if not mp.enabled or not window or before <= trigger_tokens(policy, window):
        return MaskResult(out, [], 0, before, before, tokens, triggered=False)

    results = [i for i, m in enumerate(messages) if is_result(m)]
    candidates = results[: max(0, len(results) - mp.keep_recent)]
    names = tool_names_by_call_id(messages)
    never = set(mp.exclude_tools) | set(policy.compaction.pinned_tools)
    chosen: list[tuple[int, dict[str, Any], Spill]] = []
    for i in candidates:
        msg = messages[i]
        content = msg.get("content")
        name = result_tool_name(msg, names)
        if (
            not content
            or is_placeholder(content)
            or name in never
            or is_protected(msg, policy.compaction.protected, name)
        ):
            continue
        sid = spill_id(content)
        cid = msg.get("tool_call_id")
        spill = Spill(sid, name, cid if isinstance(cid, str) else None, content, pairs[i][1], i)
        chosen.append((i, {**msg, "content": placeholder(name, pairs[i][1], sid)}, spill))
    new_tokens = list(tokens)
    spills: list[Spill] = []
    for i, masked, spill in chosen:
        # Only the content changes, so the message's other tokens carry over unchanged.
        masked_tokens = tokens[i] - pairs[i][1] + counter.text_tokens(masked["content"], model)
        if masked_tokens >= tokens[i]:
            continue  # the placeholder would not be shorter
        out[i] = masked
        new_tokens[i] = masked_tokens
        spills.append(spill)
    after = sum(new_tokens) + overhead
    return MaskResult(out, spills, before - after, before, after, new_tokens, triggered=True)
