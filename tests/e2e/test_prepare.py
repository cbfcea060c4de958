"""Summaries prepared in the background (SPEC section 5, ``compaction.prepare_ratio``): a long
session through the real ``openai`` SDK against the fake upstream, whose answers take 400 ms
and whose summaries 1.5 s more. Timing itself is measured in ``bench/compaction_latency.py``;
here the structure: no request waited for a summary, what went upstream, what was stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from proxy.testing import agent
from proxy.testing.fake.faults import Fault
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

MODEL = "gpt-4o-w32k"
WINDOW = 32_000
FACTS = ((2, "NOTE: the ledger lock id is LOCK-4410."), (9, "NOTE: the tax table is TAX-2291."))
SPEC = agent.AgentSpec(seed=21, output_tokens=(1500, 2600), thought_words=(10, 30),
                       facts=FACTS)
ANSWER_S, SUMMARY_S = 0.4, 1.5


def policies(tmp_path: Path, prepare_ratio: float) -> dict[str, str]:
    folder = tmp_path / f"policies-{prepare_ratio}"
    folder.mkdir()
    (folder / "platform.yaml").write_text(
        "defaults:\n  masking: {enabled: false}\n"
        f"  compaction: {{prepare_ratio: {prepare_ratio}}}\n")
    return {"CONTEXT_PROXY_POLICIES": str(folder)}


def slow_fake() -> FakeUpstream:
    answers = Fault(status=200, delay_s=ANSWER_S, times=-1,
                    match=lambda body: not is_summary_request(body))
    return FakeUpstream(models={MODEL: WINDOW}, enforce_windows=True,
                        summary_delay_s=SUMMARY_S, faults=[answers])


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def play(make_harness: Any, sdk: Any, tmp_path: Path, prepare_ratio: float, turns: int = 40,
         fake: FakeUpstream | None = None, conversation: str = "long",
         settle_each: bool = False) -> tuple[Harness, list[dict[str, str]]]:
    """Play the session (against ``fake``, else the slow one); the headers of every turn.
    ``settle_each``: each turn waits until the preparations it started have landed."""
    fake, script = fake or slow_fake(), Script()
    fake.responder = script.respond
    h = make_harness(fake=fake, env=policies(tmp_path, prepare_ratio))
    client = sdk(h, h.create_key())
    messages = agent.opening_messages(SPEC)
    seen = []
    for assistant, results in agent.turns(SPEC, turns):
        script.next = assistant
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Conversation-Id": conversation})
        seen.append(dict(raw.headers))
        messages = [*messages, assistant, *results]
        if settle_each:
            h.settle()
    h.settle()
    return h, seen


def plan_pair(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i in range(len(messages) - 1, -1, -1):
        calls = messages[i].get("tool_calls") or []
        if any(c["function"]["name"] == "write_todos" for c in calls):
            return messages[i:i + 2]
    return []


def test_a_long_session_never_waits_for_a_summary(make_harness, sdk, tmp_path: Path) -> None:
    h, seen = play(make_harness, sdk, tmp_path, 0.6)
    outcomes = [s["x-context-compaction"] for s in seen]
    compactions = outcomes.count("auto")
    assert compactions >= 2
    assert "reused" in outcomes  # the turns after a compaction reuse its summary
    # No turn waited for a summary: each compaction applied one prepared in the background.
    assert [s["x-context-summary-wait-ms"] for s in seen] == ["0"] * len(seen)
    assert h.metric("context_proxy_summaries_prepared_total", outcome="used") == compactions
    assert h.metric("context_proxy_summaries_prepared_total", outcome="failed") == 0
    assert len(h.fake.summary_requests()) <= compactions + 2
    assert all(int(s["x-context-tokens-after"]) <= WINDOW for s in seen)
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key(), max_retries=0) as c:
        got: Any = c.get("/conversations/long/dividers", cast_to=object)
    assert [d["kind"] for d in got["data"]] == ["auto"] * compactions
    assert h.metric("context_proxy_compactions_total", outcome="auto") == compactions
    # What went upstream: the system prompt, the task and the newest plan pair verbatim on
    # every turn, every planted fact on the last one (in the summary or verbatim).
    opening = agent.opening_messages(SPEC)
    client_last = agent.conversation(SPEC, 39)
    for body in h.fake.chat_requests():
        assert body["messages"][:2] == opening[:2]
    last = h.fake.chat_requests()[-1]["messages"]
    assert plan_pair(client_last) and all(m in last for m in plan_pair(client_last))
    text = json.dumps(last)
    for _, fact in FACTS:
        assert fact.split()[-1].rstrip(".") in text


def test_a_ready_summary_is_applied_at_the_last_turn_under_the_trigger(
        make_harness, sdk, tmp_path: Path) -> None:
    # Summaries ready by the next turn (no delays; each turn waits for the preparations).
    fake = FakeUpstream(models={MODEL: WINDOW}, enforce_windows=True)
    _, seen = play(make_harness, sdk, tmp_path, 0.6, turns=30, fake=fake, conversation="ready",
                   settle_each=True)
    before = [int(s["x-context-tokens-before"]) for s in seen]
    after = [int(s["x-context-tokens-after"]) for s in seen]
    outcomes = [s["x-context-compaction"] for s in seen]
    trigger = 0.80 * WINDOW
    applied = [i for i, o in enumerate(outcomes) if o == "auto"]
    assert len(applied) >= 2 and seen[applied[0]]["x-context-summary-wait-ms"] == "0"
    # Each was applied while the list as it stood (the last list sent, grown by this turn's
    # messages) was under the trigger, and the next turn, growing as much, would cross it.
    for i in applied:
        growth = before[i] - before[i - 1]
        view = after[i - 1] + growth
        assert view <= trigger * 1.03 and view + growth > trigger * 0.97, (i, view, growth)
    assert all(a <= WINDOW for a in after)


def test_preparing_never_changes_what_a_request_sends(make_harness, sdk, tmp_path: Path
                                                      ) -> None:
    # (two conversations: both proxies share the test's store, and the second one would reuse
    # the first one's summaries)
    prepared, on = play(make_harness, sdk, tmp_path, 0.6, turns=24, conversation="on")
    synchronous, off = play(make_harness, sdk, tmp_path, 1.0, turns=24, conversation="off")
    first_sync = next(i for i, s in enumerate(off) if s["x-context-compaction"] == "auto")
    first_applied = next(i for i, s in enumerate(on) if s["x-context-compaction"] == "auto")
    sent_on = prepared.fake.chat_requests()
    sent_off = synchronous.fake.chat_requests()
    # Until either compacts, both send the same; after the synchronous design's compaction,
    # until the prepared summary is applied (a turn sooner when it was ready before the
    # trigger, later when it was still being made), the prepared run sends the client's own.
    first = min(first_sync, first_applied)
    assert first > 0 and sent_on[:first] == sent_off[:first]
    client = agent.opening_messages(SPEC)
    for i, (assistant, results) in enumerate(agent.turns(SPEC, first_applied)):
        if first_sync <= i < first_applied:
            assert sent_on[i]["messages"] == client
        client = [*client, assistant, *results]
    assert [s["x-context-summary-wait-ms"] != "0" for s in off].count(True) >= 1
    assert synchronous.metric("context_proxy_summaries_prepared_total", outcome="used") == 0


def test_a_failed_preparation_fails_open(make_harness, sdk, tmp_path: Path) -> None:
    fake = slow_fake()
    fake.summary_delay_s = 0.0
    fake.faults.insert(0, Fault(status=500, match=is_summary_request, times=1))
    h, headers = play(make_harness, sdk, tmp_path, 0.6, turns=16, fake=fake,
                      conversation="flaky", settle_each=True)
    seen = [s["x-context-compaction"] for s in headers]
    assert h.metric("context_proxy_summaries_prepared_total", outcome="failed") == 1
    assert "failed" not in seen  # no request saw the preparation's failure
    assert "auto" in seen  # a later preparation was made and applied


def test_manual_compaction_and_the_overflow_retry_still_compact_at_once(
        make_harness, sdk, tmp_path: Path) -> None:
    # The policy believes the window is 64k; the upstream enforces 32k. Preparation is on.
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "platform.yaml").write_text(
        "defaults:\n  masking: {enabled: false}\n"
        f"models: {{{MODEL}: {{context_window: 65536}}}}\n")
    h = make_harness(fake=FakeUpstream(models={MODEL: WINDOW}, enforce_windows=True),
                     env={"CONTEXT_PROXY_POLICIES": str(folder)}, manual_compaction=True)
    client = sdk(h, h.create_key())
    messages = agent.conversation(SPEC, 16)
    retried = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "overflow"})
    assert retried.headers["X-Context-Retried"] == "context_length_exceeded"
    assert retried.headers["X-Context-Compaction"] == "auto"
    assert int(retried.headers["X-Context-Summary-Wait-Ms"]) >= 0
    reused = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "overflow"})
    assert reused.headers["X-Context-Compaction"] == "reused"
    assert reused.headers["X-Context-Summary-Wait-Ms"] == "0"
    manual = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=agent.conversation(SPEC, 6), tools=agent.TOOLS,  # type: ignore[arg-type]
        extra_headers={"X-Conversation-Id": "asked", "X-Context-Compact": "now"})
    assert manual.headers["X-Context-Compaction"] == "manual"
    assert "X-Context-Divider-Id" in manual.headers
    assert h.metric("context_proxy_summaries_prepared_total", outcome="used") == 0
