"""Which models bind replayed reasoning to its history: the built-in list and the policy's
``models.<name>.reasoning_bound`` override."""

from __future__ import annotations

import pytest

from proxy.context.binding import Bindings, builtin_bound, reasoning_bound
from proxy.policy.model import PolicyError, build_policy, flatten, validate_layer


@pytest.mark.parametrize("model", [
    "claude-opus-5-5", "claude-opus-5-5-20261001", "claude-sonnet-5-5", "claude-haiku-5-5",
    "claude-fable-5-1", "claude-fable-5", "claude-mythos-5-2", "us.anthropic.claude-sonnet-5-5",
    "gpt-5.6", "gpt-5.6-codex", "gpt-5.7-mini", "gpt-6", "openai/gpt-5.9", "GPT-5.6"])
def test_the_documented_models_bind(model: str) -> None:
    assert builtin_bound(model)


@pytest.mark.parametrize("model", [
    "claude-opus-5", "claude-sonnet-4-5", "claude-opus-4-8", "claude-fable-50", "gpt-5",
    "gpt-5.5", "gpt-5.1-codex", "gpt-4o", "o3", "my-llama", ""])
def test_other_models_do_not(model: str) -> None:
    assert not builtin_bound(model)


def test_the_models_table_overrides_the_list() -> None:
    policy = build_policy(validate_layer(flatten({"models": {
        "gpt-5.6": {"reasoning_bound": False},
        "my-gateway-alias": {"context_window": 32_000, "reasoning_bound": True}}})))
    assert not reasoning_bound("gpt-5.6", policy)
    assert reasoning_bound("my-gateway-alias", policy)
    assert policy.models["my-gateway-alias"] == 32_000
    assert reasoning_bound("claude-opus-5-5", policy)  # not in the table: the list decides


def test_a_reasoning_bound_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(PolicyError, match="true or false"):
        validate_layer(flatten({"models": {"gpt-5.6": {"reasoning_bound": "yes"}}}))


class _Read:
    def __init__(self, reasoning: bool) -> None:
        self.reasoning, self.reasoned = reasoning, frozenset[int]()


def test_a_model_whose_provider_dropped_reasoning_is_learned_as_bound() -> None:
    """An answer that lists reasoning dropped for a changed prefix shows the model binds it,
    whatever the built-in list says; the policy's explicit word still wins."""
    b, policy = Bindings(), build_policy()
    assert not b.binds(_Read(True), "my-gateway-alias", policy)
    b.learn("my-gateway-alias")
    assert b.binds(_Read(True), "my-gateway-alias", policy)
    assert not b.binds(_Read(False), "my-gateway-alias", policy)  # no reasoning: unaffected
    assert not b.binds(None, "my-gateway-alias", policy)  # chat completions
    off = build_policy(validate_layer(flatten(
        {"models": {"my-gateway-alias": {"reasoning_bound": False}}})))
    assert not b.binds(_Read(True), "my-gateway-alias", off)
    for i in range(Bindings.LEARNED + 5):
        b.learn(f"m{i}")
    assert len(b.seen) == Bindings.LEARNED  # bounded
