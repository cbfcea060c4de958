"""The no-loop rule of the pure plan (SPEC section 5): after a summary that could not get the
list under the trigger, the next one waits until the part it would summarize has grown by
``masking.min_free_ratio`` × window tokens (not a keep window's worth)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from factories import assistant, system, user, words

from proxy.context.stages.plan import apply_prior, plan
from proxy.context.stages.scope import Scope
from proxy.context.stages.shared import prefix_hash
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import MaskingPolicy, Policy

MODEL = "gpt-4o"
WINDOW = 8_000  # trigger 7,600 (raised by the fixed part); keep window 800; min free 400


@dataclass(frozen=True)
class StoredCompaction:
    """A stored compaction as the service keeps one (``tokens_after`` included, though the
    rule must not need it)."""

    prefix_hash: str
    covered: int
    preserved: tuple[int, ...]
    summary: str
    status: str
    tokens_after: int


def scope(min_free: float = 0.05) -> Scope:
    pol = replace(Policy(), masking=replace(MaskingPolicy(), enabled=False,
                                           min_free_ratio=min_free))
    return Scope(pol, WINDOW, TokenCounter(), MODEL)


def opening() -> list[dict[str, Any]]:
    """A system prompt close to the trigger on its own, then a few turns."""
    msgs = [system(words(7_300, 1)), user("Write the report.")]
    for t in range(6):
        msgs += [assistant(f"Step {t}: " + words(120, 10 + t)), user(f"Go on with part {t}.")]
    return msgs


def insufficient_prior(msgs: list[dict[str, Any]], sc: Scope) -> StoredCompaction:
    """What the service stores for the first summary of ``msgs``: still over the trigger."""
    first = plan(msgs, sc)
    assert first.action == "summarize"
    prior = StoredCompaction(prefix_hash(msgs, first.covered), first.covered, first.preserved,
                             "Earlier: steps 0 to 3 were done.", "insufficient", 0)
    after = sc.count(apply_prior(msgs, prior, sc.policy).messages)
    assert after > first.compaction.trigger_tokens  # type: ignore[union-attr]
    return replace(prior, tokens_after=after)


def turn(t: int, size: int) -> list[dict[str, Any]]:
    return [assistant(f"Step {t}: " + words(size, 100 + t)), user(f"Go on with part {t}.")]


def test_the_next_summary_waits_for_min_free_ratio_of_new_messages() -> None:
    sc = scope()
    msgs = opening()
    prior = insufficient_prior(msgs, sc)
    min_free = 0.05 * WINDOW
    actions, grown = [], list(msgs)
    for t in range(6):
        grown += turn(t, 90)  # about 100 tokens a turn: a keep window takes eight
        p = plan(grown, sc, prior)
        assert p.view.prior is prior and p.compaction is not None
        new = p.compaction.new_tokens
        assert p.action == ("summarize" if new >= min_free else "insufficient"), (t, new)
        actions.append(p.action)
        if p.action == "summarize":
            # Well before a keep window's worth of growth (the rule this replaced).
            assert p.mask.tokens_after < prior.tokens_after + p.compaction.keep_budget
            break
    assert actions[0] == "insufficient" and actions[-1] == "summarize", actions


def test_new_tokens_count_only_what_the_earlier_summary_did_not_cover() -> None:
    sc = scope()
    msgs = opening()
    prior = insufficient_prior(msgs, sc)
    grown = [*msgs, *turn(0, 90)]
    p = plan(grown, sc, prior)
    assert p.compaction is not None
    view, tokens = p.mask.messages, p.mask.message_tokens
    summary_at = len(prior.preserved)
    expected = sum(tokens[i] for i in p.compaction.summarize if i != summary_at)
    assert summary_at in p.compaction.summarize  # the earlier summary is rolled in...
    assert p.compaction.new_tokens == expected  # ...but is not new
    assert view[summary_at]["content"].count("steps 0 to 3") == 1


def test_the_threshold_is_the_policy_share_and_a_manual_compaction_skips_it() -> None:
    msgs = opening()
    grown = [*msgs, *turn(0, 90)]
    # min_free_ratio 0: anything new is enough; 0.5: nothing this size is.
    eager, strict = scope(0.0), scope(0.5)
    assert plan(grown, eager, insufficient_prior(msgs, eager)).action == "summarize"
    prior = insufficient_prior(msgs, strict)
    assert plan(grown, strict, prior).action == "insufficient"
    assert plan(grown, strict, prior, force=True).action == "summarize"
