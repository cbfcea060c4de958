"""Retrieval rerank, the pure part (SPEC section 8): prompt, strict parse, fail-open merge.

Contract, for ``n`` documents of which the first ``c`` are candidates (``c`` <= ``n``):

- ``build_messages`` asks the model for a JSON array holding every candidate index (0-based,
  as numbered in the prompt) exactly once, best first. No ``tools``; plain text answer.
- ``parse_order`` accepts only that: a JSON array of ``c`` distinct integers in ``[0, c)``,
  optionally inside one Markdown code fence. Anything else (prose, an object, a float, a
  missing, repeated or out-of-range index) raises ``Unparsable`` naming the kind of failure.
- ``merge`` returns a permutation of ``range(n)``: the candidates in the model's order, then
  documents ``c..n-1`` in input order. With no order (skipped, timeout, error, unparsable) it
  returns the input order. So the result set never changes; only the order can.
- ``relevance_scores`` derives the score from the final rank: ``1 - rank / n`` (1.0 for the
  first, ``1/n`` for the last), the same formula whatever the outcome, so scores always
  decrease down the list and mean "position", not a calibrated probability.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.policy.model import RerankPolicy

Outcome = Literal["applied", "skipped", "timeout", "error", "unparsable"]

# Bounds the prompt: a retrieval passage longer than this is cut in the prompt only (the
# response always carries the client's full document).
MAX_DOC_CHARS = 2000
MAX_QUERY_CHARS = 2000

SYSTEM_PROMPT = (
    "You rank search results by how well they answer a query. You are given a query and "
    "numbered passages. Answer with only a JSON array of the passage numbers, best first, "
    "containing every number exactly once, for example [2, 0, 1]. Do not add any other text."
)

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(.*)\n[ \t]*```\Z", re.DOTALL)


class Unparsable(ValueError):
    """The model's answer is not a permutation of the candidates; ``kind`` says why."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class Plan:
    """What to do for a request: ``candidates`` > 0 means call the model with that many of the
    first documents; otherwise ``reason`` says why the input order is returned as is."""

    candidates: int
    model: str | None
    reason: str = ""


def plan(policy: RerankPolicy, n_documents: int, request_model: str | None) -> Plan:
    """Decide whether to call the model: only when enabled, with more than ``keep`` documents
    and a model to ask (``rerank.model``, else the request's ``model``)."""
    model = policy.model or request_model
    if not policy.enabled:
        return Plan(0, model, "disabled")
    if n_documents <= policy.keep:
        return Plan(0, model, "few_documents")
    if not model:
        return Plan(0, None, "no_model")
    return Plan(min(policy.candidates, n_documents), model)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def build_messages(query: str, candidates: Sequence[str]) -> list[dict[str, Any]]:
    """The chat messages of the ranking call for ``candidates`` (texts, best-known order)."""
    passages = "\n\n".join(f"[{i}] {_clip(' '.join(t.split()), MAX_DOC_CHARS)}"
                           for i, t in enumerate(candidates))
    user = (f"Query: {_clip(query.strip(), MAX_QUERY_CHARS)}\n\nPassages:\n\n{passages}\n\n"
            f"Answer with a JSON array of all {len(candidates)} passage numbers "
            f"(0 to {len(candidates) - 1}), best first.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_order(answer: Any, n_candidates: int) -> list[int]:
    """The model's answer as a permutation of ``range(n_candidates)``, or ``Unparsable``."""
    if not isinstance(answer, str) or not answer.strip():
        raise Unparsable("empty", "no text in the answer")
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:  # models often wrap JSON in a code fence; the inside must still be exact
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        raise Unparsable("not_json", "the answer is not a JSON array") from None
    if not isinstance(value, list):
        raise Unparsable("not_array", f"expected a JSON array, got {type(value).__name__}")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise Unparsable("not_integers", "every entry must be an integer")
    bad = [i for i in value if not 0 <= i < n_candidates]
    if bad:
        raise Unparsable("out_of_range", f"index {bad[0]} is outside 0..{n_candidates - 1}")
    if len(set(value)) != len(value):
        raise Unparsable("repeated", "an index appears more than once")
    if len(value) != n_candidates:
        raise Unparsable("missing", f"{n_candidates - len(value)} of {n_candidates} candidates "
                         "are missing")
    return list(value)


def merge(n_documents: int, candidate_order: Sequence[int] | None) -> list[int]:
    """Final order: ``candidate_order`` (a permutation of ``range(c)``), then ``c..n-1`` in input
    order. ``None`` gives the input order. Refuses anything that is not a permutation, so a bug
    upstream of it can never drop or duplicate a result."""
    if candidate_order is None:
        return list(range(n_documents))
    c = len(candidate_order)
    if c > n_documents or sorted(candidate_order) != list(range(c)):
        raise ValueError("candidate_order must be a permutation of range(c), c <= n")
    return [*candidate_order, *range(c, n_documents)]


def rerank_order(n_documents: int, n_candidates: int, answer: Any
                 ) -> tuple[list[int], Outcome, str]:
    """Parse ``answer`` for the first ``n_candidates`` and merge: ``(order, outcome, kind)``.

    The order is always a permutation of ``range(n_documents)``; an unparsable answer gives the
    input order with outcome ``unparsable`` and ``kind`` naming the failure.
    """
    try:
        order = parse_order(answer, n_candidates)
    except Unparsable as e:
        return merge(n_documents, None), "unparsable", e.kind
    return merge(n_documents, order), "applied", ""


def relevance_scores(n_documents: int) -> list[float]:
    """Score of each final rank: ``1 - rank / n`` (see the module docstring)."""
    return [round(1 - rank / n_documents, 6) for rank in range(n_documents)]
