"""Reasoning bound to its history, as the providers' newest models check it: every thinking
block or reasoning item the fake issues on such a model is bound to a digest of its prefix (the
history before it, read canonically: ``proxy.testing.fake.prefixes``), and a replayed one whose
prefix changed is refused or dropped.

Anthropic Messages, models of ``strict_apis.PRESERVED_THINKING``: a changed block is refused
(``strict_apis.check_messages``, 400 "The block is bound to a different conversation"), unless
the request carries the ``thinking-binding-controls-2026-08-01`` beta and
``thinking.block_binding.prefix_mismatch_behavior: "drop_block"``. Then the first
``thinking``/``redacted_thinking`` block whose prefix changed and every later one are removed
from what the model reads, and listed, in request order, in the answer's top-level
``input_transformations`` (streamed: in the ``message_start`` event's message)::

    {"type": "thinking_block_dropped", "reason": "prefix_mismatch",
     "message_index": 3, "content_index": 0}

(indices into ``messages`` as the request sent them). The "tool loop must start with thinking"
check reads what the client sent, before any drop.

OpenAI Responses, models of ``REASONING_BOUND`` (``binds_reasoning``): a reasoning item whose
prefix changed, and every later reasoning item, is dropped, never refused, and listed in the
response object's ``input_transformations`` (whole, and in the streamed ``response.created``
and ``response.completed`` objects)::

    {"type": "reasoning_dropped", "reason": "prefix_mismatch", "item_id": "rs_…", "index": 2}

(``index`` into ``input`` as sent). The items the fake issued after a reasoning item it dropped
are valid without it from then on (``ReasoningBook.dropped``).

Both: the field is present only when something was dropped (the real APIs leave an empty one
out), ``Recorded.dropped`` counts what was dropped on that request, and the block or item the
fake issues in its answer is bound to the prefix as the model read it: the request after the
drops (a client that removes what was dropped, as it should, then replays it unchanged).
Server-side edits (``proxy.testing.fake.server_edits``) never invalidate a binding: the prefix
compared is the one the client sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.testing.fake.prefixes import Prefix, item_prefix, items_of, prefix_of
from proxy.testing.fake.strict_apis import (
    THINKING_BLOCKS,
    betas,
    drops_asked,
    first_mismatch,
    preserves_thinking,
)

# OpenAI models that bind a reasoning item to its prefix: names starting with one of these.
REASONING_BOUND = ("gpt-5.6", "gpt-5.7", "gpt-5.8", "gpt-5.9", "gpt-6")
Body = dict[str, Any]
Listed = list[dict[str, Any]]


def binds_reasoning(model: Any) -> bool:
    """Whether an OpenAI model binds its reasoning items to their prefix."""
    return isinstance(model, str) and model.startswith(REASONING_BOUND)


@dataclass
class ReasoningBook:
    """What the fake remembers of the reasoning items it issued on reasoning-bound models."""

    prefixes: dict[str, str] = field(default_factory=dict)  # rs_ id -> its prefix's digest
    dropped: set[str] = field(default_factory=set)  # rs_ ids the fake dropped on a replay


class Binder(Protocol):
    """What binding uses of ``proxy.testing.fake_upstream.FakeUpstream``."""

    strict: bool
    thinking_prefixes: dict[str, set[Prefix]]
    reasoning_book: ReasoningBook


def drops(fake: Binder, messages: bool, body: Body, headers: Mapping[str, str]
          ) -> tuple[Body, Listed]:
    """The request as the model reads it after the fake's drops (a Messages request when
    ``messages``, else a Responses one), and the drops as ``input_transformations`` entries.
    Nothing is dropped unless ``fake.strict``."""
    if not fake.strict:
        return body, []
    if messages:
        return drop_thinking(body, betas(headers), fake.thinking_prefixes)
    kept, listed = drop_reasoning(body, fake.reasoning_book.prefixes)
    fake.reasoning_book.dropped.update(str(t["item_id"]) for t in listed if t["item_id"])
    return kept, listed


def drop_thinking(body: Body, beta: frozenset[str], bound: Mapping[str, set[Prefix]]
                  ) -> tuple[Body, Listed]:
    """Under ``drop_block`` on a preserved-thinking model: ``body`` without the first issued
    block whose prefix changed and every thinking block after it, and those blocks listed."""
    if not (preserves_thinking(body.get("model")) and drops_asked(body, beta)):
        return body, []
    found = first_mismatch(body, bound)
    if found is None:
        return body, []
    at, messages, listed = found[:2], [], []
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content") if isinstance(m, dict) else None
        if i < at[0] or not isinstance(content, list):
            messages.append(m)
            continue
        kept = []
        for j, b in enumerate(content):
            if (i, j) >= at and isinstance(b, dict) and b.get("type") in THINKING_BLOCKS:
                listed.append({"type": "thinking_block_dropped", "reason": "prefix_mismatch",
                               "message_index": i, "content_index": j})
            else:
                kept.append(b)
        messages.append(dict(m, content=kept))
    return dict(body, messages=messages), listed


def _changed(body: Body, index: int, item: Any, bound: Mapping[str, str]) -> bool:
    """Whether ``item`` is a reasoning item the fake issued whose prefix is not its own."""
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return False
    made = bound.get(item["id"]) if isinstance(item.get("id"), str) else None
    return made is not None and item_prefix(body, index) != made


def drop_reasoning(body: Body, bound: Mapping[str, str]) -> tuple[Body, Listed]:
    """On a reasoning-bound model: ``body`` without the first issued reasoning item whose
    prefix changed (``bound``: rs_ id -> digest) and every reasoning item after it, and those
    items listed."""
    if not binds_reasoning(body.get("model")):
        return body, []
    items = items_of(body)
    first = next((n for n, item in enumerate(items) if _changed(body, n, item, bound)), None)
    if first is None:
        return body, []
    kept, listed = [], []
    for n, item in enumerate(items):
        if n >= first and isinstance(item, dict) and item.get("type") == "reasoning":
            listed.append({"type": "reasoning_dropped", "reason": "prefix_mismatch",
                           "item_id": item.get("id"), "index": n})
        else:
            kept.append(item)
    return dict(body, input=kept), listed


def bind_thinking(fake: Binder, body: Body, answer: Mapping[str, Any]) -> None:
    """Bind the thinking block a Messages ``answer`` opens with to its prefix in ``body`` (the
    request as the model read it), on a preserved-thinking model."""
    content = answer.get("content") or []
    if content and content[0].get("type") == "thinking" and preserves_thinking(
            body.get("model")):
        fake.thinking_prefixes.setdefault(content[0]["signature"], set()).add(
            prefix_of(body, len(body.get("messages") or []), 0))


def bind_reasoning(fake: Binder, body: Body, output: list[dict[str, Any]]) -> None:
    """Bind the reasoning item a Responses ``output`` opens with to its prefix in ``body`` (the
    request as the model read it), on a reasoning-bound model."""
    if output and output[0].get("type") == "reasoning" and binds_reasoning(body.get("model")):
        fake.reasoning_book.prefixes[output[0]["id"]] = item_prefix(body, len(items_of(body)))
