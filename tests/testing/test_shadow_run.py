"""The shadow-mode session runner's parts that need no proxy: the fake's summaries of their
budget and its scripted answers (the sessions themselves: tests/e2e/test_shadow_e2e.py)."""

from __future__ import annotations

from proxy.context.tokens.counter import TokenCounter
from proxy.testing.shadow_run import PRICES, Played, _answering, budget_summarizer


def test_a_budget_summary_has_the_budgets_tokens() -> None:
    text = budget_summarizer(3_200)({"messages": []})
    assert abs(TokenCounter().text_tokens(text, "gpt-4o") - 3_200) <= 2


def test_the_fake_answers_each_main_call_with_the_scripted_message() -> None:
    message = {"role": "assistant", "content": "Reading the file."}
    assert _answering(message)({"messages": []}) is message


def test_a_played_session_starts_empty_and_prices_cache_reads_at_a_tenth() -> None:
    played = Played("shadow")
    assert (played.sent, played.received, played.saved_usd) == ([], [], 0.0)
    assert PRICES["cached_per_mtok"] * 10 == PRICES["input_per_mtok"]
