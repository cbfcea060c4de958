"""ContextService without a server: single flight, reuse, no loops, usage correction, fail-open
and where blocking work runs. The summarizer is injected; the store is a real SQLite file."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from factories import assistant, system, tool_turn, user, words
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.auth import Principal
from proxy.context.job import ChatRequest
from proxy.context.managed import ContextService
from proxy.context.offload import run_inline, run_off_loop
from proxy.context.records.compactions import Records
from proxy.context.stages.shared import is_summary
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.summarizer import org_header
from proxy.context.tokens.counter import TokenCounter
from proxy.context.tokens.window import WindowResolver
from proxy.http.parse import check_chat
from proxy.metrics import Metrics
from proxy.policy.live import PolicyService
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.store import Store
from proxy.testing import agent
from proxy.upstream.usage import UpstreamUsage

MODEL = "svc-model"
WINDOW = 8_000
ALICE = Principal("acme", None, "key_1", "sk-upstream")


class Summaries:
    """An injected summarizer: records each call; ``gate`` holds the calls until it is set."""

    def __init__(self, reply: str = "SUMMARY: the user wants the report; CODE-42.") -> None:
        self.reply = reply
        self.calls: list[list[dict[str, Any]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.error: Exception | None = None

    def factory(self, principal: Principal, model: str, timeout_s: float) -> Any:
        async def summarize(prompt: list[dict[str, Any]], max_tokens: int) -> str:
            self.calls.append(prompt)
            await self.gate.wait()
            if self.error is not None:
                raise self.error
            return self.reply

        return summarize


def service(new_store: Callable[[str], Store], summaries: Summaries,
            counter: TokenCounter | None = None,
            **fields: Any) -> ContextService:
    store = new_store("svc.db")
    # A summary model with a large window: one call per compaction, not pieces and a merge.
    layer = validate_layer({"models": {MODEL: WINDOW, "summary-model": 1_000_000},
                            "compaction.summary_model": "summary-model",
                            "masking.enabled": False, **fields})
    policies = PolicyService(PlatformConfig(defaults=layer), store)
    return ContextService(counter=counter or TokenCounter(),
                          windows=WindowResolver(None, litellm_lookup=None),
                          records=Records(store), metrics=Metrics(), policies=policies,
                          summarizers=summaries.factory)


def chat(messages: list[dict[str, Any]]) -> ChatRequest:
    body = {"model": MODEL, "messages": messages}
    return check_chat(orjson.dumps(body), body)


def history(turns: int, size: int = 300, head: str = "You are a careful agent.") -> list[Any]:
    msgs: list[dict[str, Any]] = [system(head), user("Build the report generator.")]
    for t in range(turns):
        msgs += tool_turn("read_file", words(size, t), {"path": f"src/m{t}.py"})
        msgs.append(assistant(f"Step {t} done."))
    return msgs


async def concurrently(svc: ContextService, summaries: Summaries, n: int
                       ) -> tuple[list[Any], list[Any]]:
    """``n`` requests of one conversation over the trigger at once, the summary held until
    all of them are waiting for it: (their jobs, their reports)."""
    summaries.gate.clear()
    request = chat(history(turns=30))
    jobs = [await svc.prepare(ALICE, request, "c1") for _ in range(n)]
    tasks = [asyncio.create_task(svc.manage(job)) for job in jobs]
    await asyncio.sleep(0.05)
    summaries.gate.set()
    return jobs, list(await asyncio.gather(*tasks))


async def test_concurrent_requests_share_one_summary(new_store: Callable[[str], Store]) -> None:
    summaries = Summaries()
    svc = service(new_store, summaries)
    jobs, reports = await concurrently(svc, summaries, 3)
    assert len(summaries.calls) == 1
    assert sorted(r.outcome for r in reports) == ["auto", "reused", "reused"]
    leader = next(r for r in reports if r.outcome == "auto")
    assert leader.divider is not None
    assert all(r.messages == leader.messages for r in reports)
    assert leader.messages is not None and any(is_summary(m) for m in leader.messages)
    assert len(svc.records.dividers(jobs[0].key)) == 1


async def test_the_next_turn_reuses_the_stored_summary(new_store: Callable[[str], Store]) -> None:
    summaries = Summaries()
    svc = service(new_store, summaries)
    msgs = history(turns=30)
    first = await svc.manage(await svc.prepare(ALICE, chat(msgs), "c1"))
    assert first.outcome == "auto" and first.messages is not None
    grown = [*msgs, user("And the totals row?"), assistant("Added.")]
    second = await svc.manage(await svc.prepare(ALICE, chat(grown), "c1"))
    assert second.outcome == "reused" and len(summaries.calls) == 1
    assert second.messages == [*first.messages, *grown[len(msgs):]]
    assert second.divider is None and second.tokens_after < second.tokens_before
    edited = [*msgs[:3], {**msgs[3], "content": "edited"}, *msgs[4:]]  # another prefix
    third = await svc.manage(await svc.prepare(ALICE, chat(edited), "c1"))
    assert third.outcome == "auto" and len(summaries.calls) == 2


async def test_no_loops_while_the_preserved_part_alone_is_over_the_trigger(
        new_store: Callable[[str], Store]) -> None:
    summaries = Summaries()
    svc = service(new_store, summaries)
    msgs = history(turns=20, head=words(7_300, 1))  # the system prompt alone is near the trigger
    first = await svc.manage(await svc.prepare(ALICE, chat(msgs), "c1"))
    assert first.outcome == "insufficient" and first.divider is not None
    assert len(summaries.calls) == 1
    # One more turn moves the cut past older messages (something new to summarize), but less
    # than masking.min_free_ratio × window (400 tokens) of it: no new summary yet.
    small = [*msgs, *tool_turn("read_file", words(300, 99)), assistant("Step 20 done.")]
    again = await svc.manage(await svc.prepare(ALICE, chat(small), "c1"))
    assert again.outcome == "insufficient" and len(summaries.calls) == 1
    big = small + history(turns=6)[2:]  # well over 400 tokens of new messages
    later = await svc.manage(await svc.prepare(ALICE, chat(big), "c1"))
    assert len(summaries.calls) == 2 and later.outcome == "insufficient"


async def test_the_upstream_count_corrects_later_estimates(
        new_store: Callable[[str], Store]) -> None:
    svc = service(new_store, Summaries())
    msgs = history(turns=4)
    job = await svc.prepare(ALICE, chat(msgs), "c1")
    report = await svc.manage(job)
    assert job.ratio == 1.0 and report.outcome == "none"
    await svc.record_usage(job, report, UpstreamUsage(round(report.estimate_after * 1.5)))
    again = await svc.prepare(ALICE, chat(msgs), "c1")
    assert again.ratio == 1.5
    assert again.scope.policy.compaction.trigger_ratio == pytest.approx(0.8 / 1.5)
    corrected = await svc.manage(again)
    assert corrected.tokens_before == round(report.tokens_before * 1.5)
    assert corrected.estimate_after == report.estimate_after
    other = await svc.prepare(ALICE, chat(msgs), "c2")  # another conversation: uncorrected
    assert other.ratio == 1.0


@pytest.mark.parametrize("error", [SummaryFailed("empty"), TimeoutError()])
async def test_a_failed_summary_leaves_the_conversation_unchanged(
        new_store: Callable[[str], Store], error: Exception) -> None:
    summaries = Summaries()
    summaries.error = error
    svc = service(new_store, summaries)
    jobs, reports = await concurrently(svc, summaries, 2)
    assert [r.outcome for r in reports] == ["failed", "failed"] and len(summaries.calls) == 1
    assert all(r.messages is None and r.divider is None for r in reports)
    assert svc.records.dividers(jobs[0].key) == [] and svc.records.latest(jobs[0].key) is None


async def test_blocking_work_runs_where_prepare_decided(new_store: Callable[[str], Store]) -> None:
    threads: list[int] = []

    class Recording(TokenCounter):
        def token_pairs(self, messages: Any, model: str) -> list[tuple[int, int]]:
            threads.append(threading.get_ident())
            return super().token_pairs(messages, model)

    counter = Recording(offload_chars=20_000)
    counter.encoding(MODEL)
    svc = service(new_store, Summaries(), counter)
    small = await svc.prepare(ALICE, chat(history(turns=1)), "small")
    msgs = history(turns=40)
    big = await svc.prepare(ALICE, chat(msgs), "big")
    assert small.offload is run_inline and big.offload is run_off_loop
    assert small.bulk is run_inline and big.bulk is run_off_loop
    await svc.manage(small)
    assert set(threads) == {threading.get_ident()}
    threads.clear()
    await svc.manage(big)
    assert threads and threading.get_ident() not in threads
    # The next turn repeats the big history: only its new messages are counted, on the loop,
    # and only work over the whole body (hashing a covered prefix) would take a thread.
    threads.clear()
    grown = await svc.prepare(ALICE, chat([*msgs, user("more"), assistant("ok")]), "big")
    assert grown.known.unchanged == len(msgs)
    assert grown.offload is run_inline and grown.bulk is run_off_loop
    await svc.manage(grown)
    assert set(threads) == {threading.get_ident()}


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(8, 40), keep=st.integers(1, 6))
def test_a_fresh_replica_masks_what_a_warm_one_does(new_store: Callable[[str], Store], seed: int,
                                                    n: int, keep: int) -> None:
    """Below the compaction trigger, what a request sends does not depend on whether this
    proxy saw the conversation's earlier turns: a restarted proxy or another replica sends
    the same bytes."""
    spec = agent.AgentSpec(seed=seed, output_tokens=(200, 900), thought_words=(5, 15))
    fields = {"masking.enabled": True, "masking.keep_recent": keep,
              "compaction.enabled": False}

    async def run() -> tuple[list[Any], list[Any]]:
        warm = service(new_store, Summaries(), **fields)
        msgs = agent.opening_messages(spec)
        warm_sent: list[Any] = []
        for reply, results in agent.turns(spec, n):
            report = await warm.manage(await warm.prepare(ALICE, chat(msgs), "c"))
            warm_sent = report.messages if report.messages is not None else msgs
            msgs = [*msgs, reply, *results]
        fresh = service(new_store, Summaries(), **fields)
        last = msgs[:len(msgs) - 1 - len(results)]  # the last request the warm one saw
        report = await fresh.manage(await fresh.prepare(ALICE, chat(last), "c"))
        return warm_sent, report.messages if report.messages is not None else last

    warm_sent, fresh_sent = asyncio.run(run())
    assert orjson.dumps(warm_sent) == orjson.dumps(fresh_sent)


async def test_requests_of_different_lengths_compacting_at_once_all_succeed(
        new_store: Callable[[str], Store]) -> None:
    """One conversation hit at the same moment by requests whose histories differ in length:
    each compacts its own prefix; none fails on the divider's sequence number (50 rounds)."""
    summaries = Summaries()
    svc = service(new_store, summaries)
    full = history(turns=36)
    for round_ in range(50):
        summaries.gate.clear()
        lengths = (len(full) - 12, len(full) - 6, len(full))
        jobs = [await svc.prepare(ALICE, chat(full[:n]), f"race-{round_}") for n in lengths]
        tasks = [asyncio.create_task(svc.manage(job)) for job in jobs]
        await asyncio.sleep(0)
        summaries.gate.set()
        reports = await asyncio.gather(*tasks)
        assert [r.outcome for r in reports] == ["auto", "auto", "auto"], round_
        dividers = svc.records.dividers(jobs[0].key)
        assert len(dividers) == 3 and len({d["id"] for d in dividers}) == 3
        assert svc.records.latest(jobs[0].key) is not None
        assert svc.records.latest(jobs[0].key).seq == 3  # type: ignore[union-attr]


async def test_a_summary_longer_than_asked_is_cut_at_a_sentence_and_marked(
        new_store: Callable[[str], Store]) -> None:
    sentence = "The user wants the quarterly report split by region and currency. "
    summaries = Summaries(reply=sentence * 400)  # an upstream that ignores max_tokens
    svc = service(new_store, summaries)
    report = await svc.manage(await svc.prepare(ALICE, chat(history(turns=30)), "c1"))
    assert report.outcome == "auto" and report.divider is not None
    assert report.divider.truncated and report.divider.divider()["truncated"] is True
    summary = report.divider.summary
    assert summary.endswith("currency.") and len(summary) < len(sentence * 400)
    stored = svc.records.dividers(report.divider.conversation)
    assert stored[0]["truncated"] is True
    fitting = Summaries(reply=sentence)
    other = service(new_store, fitting)
    normal = await other.manage(await other.prepare(ALICE, chat(history(turns=30)), "c1"))
    assert normal.divider is not None and not normal.divider.truncated


def test_the_organization_header_value_is_safe_for_any_name() -> None:
    assert org_header("acme") == "acme"
    assert org_header("Acme Corp (EU)") == "Acme Corp (EU)"
    assert org_header("müller\r\nX-Evil: 1") == "m%C3%BCller%0D%0AX-Evil%3A%201"


async def test_a_summary_too_long_to_use_is_still_counted_as_a_summary_call(
        new_store: Callable[[str], Store]) -> None:
    # The summary may take 2,400 tokens; the reply fills them, more than the ~1,000 tokens it
    # would replace: the list would not shrink, so it is not used. The call was paid for. (The
    # system prompt is large enough that the trigger it raises, 95% of the window, is crossed.)
    summaries = Summaries(reply=words(3_000, 5))
    svc = service(new_store, summaries, **{"compaction.summary_ratio": 0.3})
    msgs = history(turns=10, size=60, head=words(7_400, 1))
    job = await svc.prepare(ALICE, chat(msgs), "c1")
    report = await svc.manage(job)
    assert len(summaries.calls) == 1
    assert report.outcome == "insufficient" and report.divider is None
    assert report.messages is None  # the client's list goes on unchanged
    totals = svc.records.usage_totals(job.key)["summary-model"]
    assert totals["summary_calls"] == 1
