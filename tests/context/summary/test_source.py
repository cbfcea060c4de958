"""SummarySource without a server: the summary calls a request's compaction uses, and the
single flight in the process (followers share the leader's record; a leader that made none, or
raised, leaves them ``failed``). The summarizer is injected; the store is a real SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from factories import assistant, system, tool_turn, user, words

from proxy.auth import Principal
from proxy.context.job import ChatRequest
from proxy.context.managed import ContextService
from proxy.context.records.compactions import Records
from proxy.context.report import ContextReport
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.source import SummarySource, report_of
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.http.parse import check_chat
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.store import Store

MODEL = "src-model"
ALICE = Principal("acme", None, "key_1", "sk-upstream")


class Gated:
    """An injected summarizer whose calls wait for ``gate``; ``error`` is raised if set."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.error: Exception | None = None

    def factory(self, principal: Principal, model: str, timeout_s: float) -> Any:
        async def summarize(prompt: list[dict[str, Any]], max_tokens: int) -> str:
            self.calls += 1
            await self.gate.wait()
            if self.error is not None:
                raise self.error
            return "SUMMARY: the user wants the report; CODE-42."

        return summarize


def service(new_store: Callable[[str], Store], summaries: Gated) -> ContextService:
    layer = validate_layer({"models": {MODEL: 8_000, "summary-model": 1_000_000},
                            "compaction.summary_model": "summary-model",
                            "masking.enabled": False})
    store = new_store("source.db")
    return ContextService(counter=TokenCounter(),
                          windows=WindowResolver(None, litellm_lookup=None),
                          records=Records(store), metrics=Metrics(),
                          policies=PolicyService(PlatformConfig(defaults=layer), store),
                          summarizers=summaries.factory)


def long_chat() -> ChatRequest:
    msgs: list[dict[str, Any]] = [system("You are a careful agent."), user("Build it.")]
    for t in range(30):
        msgs += tool_turn("read_file", words(300, t), {"path": f"src/m{t}.py"})
        msgs.append(assistant(f"Step {t} done."))
    body = {"model": MODEL, "messages": msgs}
    return check_chat(orjson.dumps(body), body)


async def three_at_once(svc: ContextService, summaries: Gated) -> list[Any]:
    """Three requests of one conversation past the trigger, all waiting for one summary call."""
    request = long_chat()  # one list: each built anew would have new tool call ids
    jobs = [await svc.prepare(ALICE, request, "c1") for _ in range(3)]
    tasks = [asyncio.create_task(svc.manage(job)) for job in jobs]
    await asyncio.sleep(0.05)
    summaries.gate.set()
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_the_service_delegates_to_its_summary_source(
        new_store: Callable[[str], Store]) -> None:
    svc = service(new_store, Gated())
    assert isinstance(svc.summaries, SummarySource)
    assert svc.preparer is svc.summaries.preparer and svc.flights is svc.summaries.flights


async def test_followers_share_the_leaders_summary(new_store: Callable[[str], Store]) -> None:
    summaries = Gated()
    svc = service(new_store, summaries)
    reports = await three_at_once(svc, summaries)
    assert summaries.calls == 1
    assert sorted(r.outcome for r in reports) == ["auto", "reused", "reused"]
    assert all(r.summary_wait_ms is not None for r in reports)


async def test_a_leader_that_made_no_summary_leaves_its_followers_failed(
        new_store: Callable[[str], Store]) -> None:
    summaries = Gated()
    summaries.error = SummaryFailed("empty")
    svc = service(new_store, summaries)
    reports = await three_at_once(svc, summaries)
    assert summaries.calls == 1 and [r.outcome for r in reports] == ["failed"] * 3


async def test_a_leader_that_raised_leaves_its_followers_failed(
        new_store: Callable[[str], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    summaries = Gated()
    svc = service(new_store, summaries)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("store broke")

    monkeypatch.setattr(svc.records, "add_compaction", broken)
    results = await three_at_once(svc, summaries)
    raised = [r for r in results if isinstance(r, RuntimeError)]
    assert len(raised) == 1 and summaries.calls == 1  # the followers made none of their own
    assert [r.outcome for r in results if isinstance(r, ContextReport)] == ["failed"] * 2


def test_the_summary_calls_use_the_requests_own_api_when_it_was_adapted(
        new_store: Callable[[str], Store]) -> None:
    chat_calls: list[str] = []
    api_calls: list[str] = []

    def chat_factory(principal: Principal, model: str, timeout: float) -> Any:
        chat_calls.append(model)
        return "chat"

    def api_factory(principal: Principal, model: str, timeout: float, adapted: Any) -> Any:
        api_calls.append(model)
        return "api"

    unused: Any = None  # what choosing the summary calls never touches
    windows = WindowResolver(None, litellm_lookup=None)
    source = SummarySource(counter=TokenCounter(), windows=windows,
                           records=Records(new_store("calls.db")), metrics=Metrics(),
                           ledger=unused, history=unused, replan=unused,
                           summarizers=chat_factory, api_summarizers=api_factory)
    policy = SimpleNamespace(compaction=SimpleNamespace(summary_timeout_s=5.0))

    def job(adapted: object) -> Any:
        return SimpleNamespace(policy=policy, principal=ALICE,
                               request=SimpleNamespace(adapted=adapted))

    assert source.summarizer(job(None), "m1") == "chat"
    assert source.summarizer(job(object()), "m2") == "api"
    assert (chat_calls, api_calls) == (["m1"], ["m2"])


def test_a_report_of_an_unchanged_plan_sends_nothing_new() -> None:
    p: Any = SimpleNamespace(changed=False, mask=SimpleNamespace(messages=[], masked=[]),
                             tokens_after_mask=90, tokens_before=100, kept=7)
    job: Any = SimpleNamespace(conversation_id="c1", reported=lambda n: n, window_source="x",
                               scope=SimpleNamespace(compaction_window=500))
    report = report_of(job, p, "none", None)
    assert (report.messages, report.tokens_before, report.tokens_after) == (None, 100, 90)
    assert report.outcome == "none"
