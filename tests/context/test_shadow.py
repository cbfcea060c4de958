"""Shadow mode without a server (``proxy.context.shadow`` through ``ContextService``): the plan
is managed mode's, nothing is executed (no summary call, no divider, no spill, the client's
bytes forwarded), a would-be compaction is remembered for the conversation's next requests and
estimated with its summary at its budget. The store is a real SQLite file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from test_managed import ALICE, MODEL, Summaries, chat, history, service

from proxy.context.shadow import ShadowFigures, filler, summary_budget
from proxy.context.stages.mask import PLACEHOLDER_PREFIX
from proxy.context.tokens.counter import TokenCounter
from proxy.store import Store


def test_the_figures_are_said_in_headers() -> None:
    figures = ShadowFigures(3, "auto", 1_200, 5_000, 0.0123456)
    assert figures.headers() == {
        "X-Context-Mode": "shadow", "X-Context-Shadow-Masked": "3",
        "X-Context-Shadow-Compaction": "auto", "X-Context-Shadow-Tokens-After": "1200",
        "X-Context-Shadow-Saved-Tokens": "5000", "X-Context-Shadow-Saved-Usd": "0.012346"}


def test_the_filler_has_as_many_tokens_as_asked() -> None:
    counter = TokenCounter()
    for model in ("gpt-4o", "gpt-4", "claude-sonnet-4-5"):
        assert counter.text_tokens(filler(800), model) == 800
    assert filler(-3) == ""


async def test_a_compaction_is_planned_not_made_and_its_estimate_is_remembered(
        new_store: Callable[[str], Store]) -> None:
    summaries = Summaries()
    svc = service(new_store, summaries, mode="shadow")
    msgs = history(turns=30)
    job = await svc.prepare(ALICE, chat(msgs), "c1")
    first = await svc.manage(job)
    assert first.messages is None and job.request.outgoing(first) == job.request.raw
    assert (first.outcome, first.masked, first.divider) == ("none", 0, None)
    assert first.tokens_after == first.tokens_before
    shadow = first.shadow
    assert shadow is not None and shadow.compaction == "auto"
    assert summary_budget(job) == 800  # 10% of the 8,000-token window
    assert 800 < shadow.tokens_after < first.tokens_before // 2
    assert shadow.saved_tokens == first.tokens_before - shadow.tokens_after
    assert summaries.calls == [] and svc.records.dividers(job.key) == []
    grown = [*msgs, {"role": "user", "content": "And the totals row?"},
             {"role": "assistant", "content": "Added."}]
    second = await svc.manage(await svc.prepare(ALICE, chat(grown), "c1"))
    assert second.shadow is not None and second.shadow.compaction == "reused"
    assert second.shadow.tokens_after < shadow.tokens_after + 100
    assert summaries.calls == []
    m = svc.metrics
    assert m.shadow_compactions.labels("acme", MODEL)._value.get() == 1
    assert m.shadow_requests.labels("acme", MODEL)._value.get() == 2
    assert m.compactions.labels("auto")._value.get() == 0


async def test_masking_is_counted_and_no_spill_is_kept(new_store: Callable[[str], Store]
                                                       ) -> None:
    svc = service(new_store, Summaries(), mode="shadow", **{
        "masking.enabled": True, "compaction.enabled": False, "masking.priced": False})
    msgs: list[Any] = history(turns=20)
    job = await svc.prepare(ALICE, chat(msgs), "c2")
    report = await svc.manage(job)
    assert report.shadow is not None and report.shadow.masked > 0
    assert report.shadow.compaction == "none" and report.masked == 0
    assert not any(PLACEHOLDER_PREFIX in str(m.get("content")) for m in msgs)
    assert svc.records.store.read("SELECT COUNT(*) AS n FROM spills")[0]["n"] == 0
    assert svc.metrics.shadow_masked.labels("acme", MODEL)._value.get() == report.shadow.masked


async def test_managed_mode_reports_no_shadow(new_store: Callable[[str], Store]) -> None:
    svc = service(new_store, Summaries())
    report = await svc.manage(await svc.prepare(ALICE, chat(history(turns=30)), "c3"))
    assert report.shadow is None and report.outcome == "auto"
    assert "X-Context-Mode" not in report.headers()
