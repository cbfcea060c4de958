"""Retrieval rerank, the pure part (``proxy.rerank.order``): plan, prompt, strict parse, fail-open
merge, scores."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.policy.model import RerankPolicy
from proxy.rerank.order import (
    SYSTEM_PROMPT,
    Unparsable,
    build_messages,
    merge,
    parse_order,
    plan,
    relevance_scores,
    rerank_order,
)

ON = RerankPolicy(enabled=True, keep=3, candidates=5)


def test_plan_skips_when_disabled_few_documents_or_no_model() -> None:
    assert plan(RerankPolicy(), 50, "gpt-4o").reason == "disabled"
    assert plan(ON, 3, "gpt-4o").reason == "few_documents"
    assert plan(ON, 4, None).reason == "no_model"
    assert plan(ON, 4, "gpt-4o").candidates == 4  # fewer documents than candidates
    assert plan(ON, 40, "gpt-4o").candidates == 5
    configured = RerankPolicy(enabled=True, keep=3, candidates=5, model="ranker")
    assert plan(configured, 40, "gpt-4o").model == "ranker"  # the policy's model wins
    assert plan(configured, 40, None).candidates == 5


def test_prompt_numbers_candidates_and_asks_for_a_json_array() -> None:
    messages = build_messages("how to reset?", ["first  doc\nline", "second " + "x" * 5000])
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = messages[1]["content"]
    assert "Query: how to reset?" in user
    assert "[0] first doc line" in user and "[1] second" in user
    assert "JSON array of all 2 passage numbers (0 to 1)" in user
    assert len(user) < 2600  # a long passage is cut in the prompt


@pytest.mark.parametrize("answer,expected", [
    ("[2, 0, 1]", [2, 0, 1]),
    ("  [1,2,0]\n", [1, 2, 0]),
    ("```json\n[0, 2, 1]\n```", [0, 2, 1]),
    ("```\n[0, 2, 1]\n```", [0, 2, 1]),
])
def test_parse_accepts_exact_permutations(answer: str, expected: list[int]) -> None:
    assert parse_order(answer, 3) == expected


@pytest.mark.parametrize("answer,kind", [
    (None, "empty"),
    ("   ", "empty"),
    ("The best passage is 2, then 0 and 1.", "not_json"),
    ("Here you go: [2, 0, 1]", "not_json"),
    ("[2, 0, 1] is my ranking", "not_json"),
    ('{"order": [2, 0, 1]}', "not_array"),
    ("[2, 0, 1.0]", "not_integers"),
    ('[2, 0, "1"]', "not_integers"),
    ("[true, 0, 1]", "not_integers"),
    ("[2, 0, 3]", "out_of_range"),
    ("[2, 0, -1]", "out_of_range"),
    ("[2, 0, 0]", "repeated"),
    ("[2, 0, 1, 1]", "repeated"),
    ("[2, 0]", "missing"),
    ("[]", "missing"),
    ("[2, 0, 1, 3]", "out_of_range"),
    ("```json\n[2, 0, 1]\n``` extra", "not_json"),
])
def test_parse_rejects_everything_else(answer: str | None, kind: str) -> None:
    with pytest.raises(Unparsable) as err:
        parse_order(answer, 3)
    assert err.value.kind == kind


def test_merge_puts_rest_after_candidates_in_input_order() -> None:
    assert merge(6, [2, 0, 1]) == [2, 0, 1, 3, 4, 5]
    assert merge(4, None) == [0, 1, 2, 3]
    assert merge(0, None) == []
    with pytest.raises(ValueError):
        merge(4, [0, 0, 1])
    with pytest.raises(ValueError):
        merge(2, [0, 1, 2])


def test_rerank_order_reports_outcome() -> None:
    assert rerank_order(5, 3, "[1, 2, 0]") == ([1, 2, 0, 3, 4], "applied", "")
    assert rerank_order(5, 3, "[1, 1, 0]") == ([0, 1, 2, 3, 4], "unparsable", "repeated")


def test_scores_follow_final_rank() -> None:
    assert relevance_scores(4) == [1.0, 0.75, 0.5, 0.25]
    assert relevance_scores(0) == []


# --- for any input and any answer, a permutation; the tail keeps input order ---

_answers = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.lists(st.integers(-3, 30), max_size=30).map(json.dumps),
    st.integers(0, 30).flatmap(lambda c: st.permutations(list(range(c)))).map(json.dumps),
    st.lists(st.one_of(st.integers(-2, 30), st.floats(allow_nan=False), st.booleans(),
                       st.text(max_size=3)), max_size=8).map(json.dumps),
)


@given(n=st.integers(0, 60), candidates=st.integers(2, 30), answer=_answers)
def test_any_answer_gives_a_permutation_and_keeps_the_tail(n: int, candidates: int,
                                                             answer: str | None) -> None:
    c = min(n, candidates)
    order, outcome, _ = rerank_order(n, c, answer)
    assert sorted(order) == list(range(n))
    assert order[c:] == list(range(c, n))
    if outcome != "applied":
        assert order == list(range(n))


@given(data=st.data(), n=st.integers(2, 60), candidates=st.integers(2, 30))
def test_a_valid_answer_is_applied(data: st.DataObject, n: int, candidates: int) -> None:
    c = min(n, candidates)
    perm = data.draw(st.permutations(list(range(c))))
    order, outcome, _ = rerank_order(n, c, json.dumps(perm))
    assert outcome == "applied"
    assert order == [*perm, *range(c, n)]
