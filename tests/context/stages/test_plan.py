"""The planner (``proxy.context.stages.plan``): a stored compaction replaces exactly the prefix
it covers, a request under both triggers is forwarded untouched, one over the trigger is
summarized (client indices), and the start of the list the previous request sent the same
is what a provider's cache can still serve."""

from __future__ import annotations

from dataclasses import dataclass

from factories import agent_session, assistant, user

from proxy.context.stages.plan import apply_prior, kept_tokens, plan, previous_point
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import is_summary, prefix_hash
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import Policy

COUNTER = TokenCounter()


@dataclass(frozen=True)
class Stored:
    prefix_hash: str
    covered: int
    preserved: tuple[int, ...]
    summary: str
    status: str = "compacted"


def test_a_prior_replaces_only_the_exact_prefix_it_covers() -> None:
    messages = agent_session(turns=4, output_tokens=50)
    prior = Stored(prefix_hash(messages, 6), 6, (0, 1), "Earlier: read four files.")
    view = apply_prior(messages, prior, Policy())
    assert view.prior is prior and view.origin[:3] == (0, 1, -1)
    assert is_summary(view.messages[2]) and view.messages[3:] == messages[6:]
    changed = [messages[0], user("another task"), *messages[2:]]
    assert apply_prior(changed, prior, Policy()).prior is None  # not the stored prefix
    assert apply_prior(changed, prior, Policy(), verified=True).prior is prior
    assert apply_prior(messages[:4], prior, Policy()).prior is None  # shorter than covered


def test_under_both_triggers_a_request_goes_as_it_is() -> None:
    messages = agent_session(turns=2, output_tokens=50)
    p = plan(messages, Scope(Policy(), 128_000, COUNTER, "gpt-4o"))
    assert p.action == "forward" and not p.changed and p.compaction is None
    assert p.view.messages == messages and p.tokens_before == p.tokens_after_mask


def test_over_the_trigger_a_summary_is_planned_in_client_indices() -> None:
    messages = agent_session(turns=12, output_tokens=600)
    p = plan(messages, Scope(Policy(), 8_000, COUNTER, "gpt-4o"))
    assert p.action == "summarize" and 0 < p.covered < len(messages)
    assert all(0 <= i < p.covered for i in p.preserved)
    assert p.tokens_before > 0.8 * 8_000


def test_the_previous_point_and_what_its_start_kept() -> None:
    messages = [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    assert previous_point(messages) == 3 and previous_point([user("x")]) == 0
    scope = Scope(Policy(), None, COUNTER, "gpt-4o")
    assert kept_tokens(scope, [10, 20, 30], 2) == 30
    p = plan(messages, scope)
    assert p.previous == 3 and p.kept == sum(COUNTER.token_pairs(messages, "gpt-4o")[i][0]
                                             for i in range(3))
