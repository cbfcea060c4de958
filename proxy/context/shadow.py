"""Shadow mode (policy ``mode: shadow``, SPEC section 7): plan as in managed mode, change nothing.

The request goes upstream as the client sent it (its exact bytes), no summary call is made and
nothing is stored (no divider, no spill); what the proxy would have done is reported instead:
``ShadowFigures`` (the ``X-Context-Shadow-*`` headers), counted per organization and model in
``/metrics`` and per organization and hour for the console.

A compaction the plan asks for is estimated with its summary at its budget,
min(``compaction.summary_ratio`` × window, ``compaction.summary_max_tokens``): a ``ShadowPrior``
whose summary is filler text of that many tokens stands for it, and later requests of the
conversation plan on it as they would on the stored compaction, so the figures follow the
session the proxy would have made. Those priors live in this process's memory, bounded; a
conversation first seen here (a restart, another replica) starts from its stored compaction,
if any, and may count a would-be compaction again.

The money a request would have saved is what its client's request costs (read from the cache
up to its previous one) less what the managed list would cost (read from the cache up to what
that list keeps of the previous one), both from the prompt side (``money.estimate``), less the
summary call a would-be compaction makes: its prompt (the covered range as the previous request
sent it, read from the cache, and the instruction) and its budget of output.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxy.context.accounting import money
from proxy.context.accounting.ledger import Ledger
from proxy.context.job import Job
from proxy.context.stages.plan import Plan, Prior, kept_tokens
from proxy.context.stages.shared import prefix_hash
from proxy.context.stages.summary import PREFIX_INSTRUCTION
from proxy.upstream.usage import UpstreamUsage

MODE = "shadow"
_PRIORS = 10_000  # conversations whose would-be compaction is remembered
Replan = Callable[[Job, Prior | None], Awaitable[Plan]]


@dataclass(frozen=True)
class ShadowPrior:
    """A compaction the proxy would have made (a ``Prior``): its summary is filler of the
    summary's budget."""

    prefix_hash: str
    covered: int
    preserved: tuple[int, ...]
    summary: str
    status: str = "compacted"


@dataclass(frozen=True)
class ShadowFigures:
    """What the proxy would have done to one request: tool results masked, the compaction
    outcome (``none``, ``auto``, ``manual``, ``reused``, ``insufficient``), the tokens it would
    have sent, and the prompt tokens and US dollars that would have been saved."""

    masked: int
    compaction: str
    tokens_after: int
    saved_tokens: int
    saved_usd: float

    def headers(self) -> dict[str, str]:
        return {"X-Context-Mode": MODE,
                "X-Context-Shadow-Masked": str(self.masked),
                "X-Context-Shadow-Compaction": self.compaction,
                "X-Context-Shadow-Tokens-After": str(self.tokens_after),
                "X-Context-Shadow-Saved-Tokens": str(self.saved_tokens),
                "X-Context-Shadow-Saved-Usd": f"{self.saved_usd:.6f}"}


def summary_budget(job: Job) -> int:
    """The summary's ``max_tokens``: min(summary_ratio × window, summary_max_tokens)."""
    cp = job.scope.policy.compaction
    return min(int(cp.summary_ratio * job.scope.compaction_window), cp.summary_max_tokens)


def filler(tokens: int) -> str:
    """Text of ``tokens`` tokens in every tokenizer the proxy counts with (`` word`` is one)."""
    return " word" * max(0, tokens)


class Shadow:
    """Plans a shadow request (``figures``) and remembers each conversation's would-be
    compaction (bounded)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._priors: OrderedDict[str, ShadowPrior] = OrderedDict()

    def prior(self, job: Job) -> Prior | None:
        """The compaction the conversation would have: its would-be one, else the stored."""
        return self._priors.get(job.key) or job.prior

    async def figures(self, job: Job, replan: Replan) -> tuple[Plan, ShadowFigures]:
        """The plan the request's figures come from and the figures: masking and compaction
        as managed mode would plan them, a new compaction estimated at its budget."""
        p = await replan(job, self.prior(job))
        outcome, summary = _outcome(p), None
        if p.action == "summarize":
            ghost = ShadowPrior(await job.bulk(prefix_hash, job.request.messages, p.covered),
                                p.covered, p.preserved, filler(summary_budget(job)))
            after = await replan(job, ghost)
            if after.view.prior is ghost and after.tokens_after_mask < p.tokens_before:
                self._remember(job.key, ghost)
                outcome, summary = job.kind, p
                p = after
            else:
                outcome = "insufficient"
        return p, ShadowFigures(
            len(p.mask.masked), outcome, job.reported(p.tokens_after_mask),
            job.reported(p.tokens_before - p.tokens_after_mask),
            self._saved(job, p, summary))

    def _remember(self, key: str, ghost: ShadowPrior) -> None:
        self._priors[key] = ghost
        self._priors.move_to_end(key)
        if len(self._priors) > _PRIORS:
            self._priors.popitem(last=False)

    def _saved(self, job: Job, p: Plan, summarized: Plan | None) -> float:
        """US dollars the request would have saved (see the module's docstring)."""
        ledger = self.ledger
        prices = ledger.prices(job.request.model, job.policy)
        previous = ledger.baseline(job.key)
        writes = previous is not None and previous.writes
        kept = p.kept if summarized is None else _kept_before_cut(job, p)
        est = money.estimate(p.tokens_before, p.tokens_after_mask, kept, False, previous,
                             prices, writes)
        saved = est.saved
        if summarized is not None:
            saved -= money.cost(_summary_call(job, summarized, writes), prices)
        return saved


def _summary_call(job: Job, p: Plan, writes: bool) -> UpstreamUsage:
    """The summary call a compaction of ``p`` would make: the covered range as the previous
    request sent it (read from the cache as far as that request's prefix is kept) and the
    instruction, answered with the summary's budget."""
    assert p.compaction is not None
    scope = job.scope
    prompt = kept_tokens(scope, p.mask.message_tokens, p.compaction.cut) + \
        scope.counter.text_tokens(PREFIX_INSTRUCTION, scope.model)
    cached = min(prompt, p.kept)
    return UpstreamUsage(prompt, cached, prompt - cached if writes else 0, summary_budget(job))


def _kept_before_cut(job: Job, p: Plan) -> int:
    """Tokens at the start of a would-be compacted list that its previous request sent: the
    tools and the leading messages the summary leaves in place, unmasked."""
    n, origin = 0, p.view.origin
    while n < len(origin) and origin[n] == n:
        n += 1
    if p.mask.first_change is not None:
        n = min(n, p.mask.first_change)
    return kept_tokens(job.scope, p.mask.message_tokens, n)


def _outcome(p: Plan) -> str:
    if p.action == "insufficient":
        return "insufficient"
    return "reused" if p.view.prior is not None else "none"
