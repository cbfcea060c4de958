"""``/metrics`` as an operator scrapes it (SPEC section 9): after a session with every outcome
(masking, each compaction outcome, each rerank outcome, upstream errors of each kind) the
exposition passes ``promtool check metrics`` and carries the operational series."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from factories import SEED_STEPS_YAML
from promtool import lint_metrics

from proxy.rerank.order import SYSTEM_PROMPT
from proxy.testing import agent
from proxy.testing.agent import DEMO, TOOLS
from proxy.testing.fake_upstream import FakeUpstream, Fault, is_summary_request
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape, series

MODEL, WINDOW = "agent-32k", 32_768
DOCS = [f"passage number {i} about topic {i % 3}" for i in range(8)]
# No window in the policy: the proxy asks the upstream's /v1/models (a call of its own).
# A rerank budget a busy CI machine answers within (only the timeout case means to exceed it).
POLICY = ("defaults:\n  rerank: {enabled: true, keep: 3, candidates: 5, timeout_ms: 1500}\n"
          f"  {SEED_STEPS_YAML}\n")


def is_rerank_call(body: dict[str, Any]) -> bool:
    return (body.get("messages") or [{}])[0].get("content") == SYSTEM_PROMPT


class Session:
    """A proxy (manual compaction on, rerank enabled) whose fake answers rerank calls with
    ``rerank_answer``, and the clients an agent and a search service would use."""

    def __init__(self, make_harness: Callable[..., Harness], tmp_path: Path) -> None:
        folder = tmp_path / "policies"
        folder.mkdir()
        (folder / "platform.yaml").write_text(POLICY)
        self.folder = folder
        self.rerank_answer = "[0, 1, 2, 3, 4]"
        self.fake = FakeUpstream(models={MODEL: WINDOW}, enforce_windows=True,
                                 responder=self._respond)
        self.h = make_harness(fake=self.fake, env={"CONTEXT_PROXY_POLICIES": str(folder)},
                              manual_compaction=True, upstream_timeout_s=2.0)
        self.key = self.h.create_key("acme")
        self.client = openai.OpenAI(base_url=self.h.base_url, api_key=self.key, max_retries=0)

    def _respond(self, body: dict[str, Any]) -> dict[str, Any]:
        content = self.rerank_answer if is_rerank_call(body) else "done"
        return {"role": "assistant", "content": content}

    def chat(self, conversation: str, messages: list[dict[str, Any]],
             **headers: str) -> str:
        """One chat request; its ``X-Context-Compaction`` outcome."""
        raw = self.client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Conversation-Id": conversation, **headers})
        raw.parse()
        return raw.headers["X-Context-Compaction"]

    def rerank(self, answer: str, docs: list[str] = DOCS) -> int:
        self.rerank_answer = answer
        return httpx.post(self.h.base_url + "/rerank", timeout=30,
                          json={"model": MODEL, "query": "topic 2", "documents": docs},
                          headers={"Authorization": f"Bearer {self.key}"}).status_code

    def scrape(self) -> str:
        return scrape(self.h.base_url)


def big_conversation() -> list[dict[str, Any]]:
    """Over the compaction trigger even after masking (the newest results are large)."""
    return agent.conversation(replace(DEMO, seed=3, output_tokens=(5000, 6000)), 10)


def crowded_conversation() -> list[dict[str, Any]]:
    """A system prompt that alone nearly fills the trigger (raised by it to 95% of the window):
    compaction cannot get under it."""
    opening = agent.opening_messages(DEMO)
    filler = " hello" * 28_100
    return [{"role": "system", "content": opening[0]["content"] + filler}, *opening[1:],
            *agent.conversation(replace(DEMO, seed=4, output_tokens=(400, 600)),
                                8)[len(opening):]]


def play(s: Session) -> list[str]:
    """Every outcome once or more; the compaction outcomes in the order they happened."""
    s.fake.faults.append(Fault(status=500, match=is_summary_request, times=1))
    big = big_conversation()
    outcomes = [s.chat("big", big) for _ in range(3)]  # failed, then auto, then reused
    outcomes.append(s.chat("asked", agent.conversation(DEMO, 4), **{"X-Context-Compact": "now"}))
    outcomes.append(s.chat("crowded", crowded_conversation()))
    assert [s.rerank("[4, 2, 0, 1, 3]"), s.rerank("nope"), s.rerank("[1]", DOCS[:2])] == [200] * 3
    s.fake.faults += [Fault(status=503, match=is_rerank_call), Fault(delay_s=1.9,
                                                                     match=is_rerank_call)]
    assert [s.rerank("[0]"), s.rerank("[0]")] == [200, 200]  # error, timeout: fail open
    s.fake.faults += [Fault(status=429), Fault(drop=True),
                      Fault(delay_s=4.0, status=200, path="/v1/embeddings")]
    for status_error in (openai.RateLimitError, openai.InternalServerError):
        with pytest.raises(status_error):
            s.chat("plain", agent.opening_messages(DEMO))
    with pytest.raises(openai.APIStatusError) as timed_out:
        s.client.embeddings.create(model="embed", input="slow")
    assert timed_out.value.status_code == 504
    return outcomes


def test_metrics_after_every_outcome_pass_promtool(make_harness, tmp_path: Path) -> None:
    s = Session(make_harness, tmp_path)
    try:
        outcomes = play(s)
        text = s.scrape()
    finally:
        s.client.close()
    assert outcomes == ["failed", "auto", "reused", "manual", "insufficient"]
    assert lint_metrics(text) == ""
    for outcome in ("failed", "auto", "reused", "manual", "insufficient"):
        assert metric(text, "context_proxy_compactions_total", outcome=outcome) >= 1, outcome
    for outcome in ("applied", "unparsable", "skipped", "error", "timeout"):
        assert metric(text, "context_proxy_rerank_total", outcome=outcome) == 1, outcome
    assert metric(text, "context_proxy_masked_tool_results_total", org="acme") > 0
    errors = {(labels["route"], labels["status"]): v
              for labels, v in series(text, "context_proxy_upstream_errors_total")}
    assert errors == {("summary", "500"): 1, ("rerank", "503"): 1, ("chat", "429"): 1,
                      ("chat", "unreachable"): 1, ("relay", "timeout"): 1}
    first_byte = "context_proxy_upstream_time_to_first_byte_seconds_count"
    for route in ("chat", "summary", "rerank", "models"):
        assert metric(text, first_byte, route=route) >= 1, route
    # answers that came (the 429 and the 503 did), not the dropped or timed-out calls
    assert metric(text, first_byte, route="relay") == 0
    assert metric(text, "context_proxy_requests_in_flight", route="metrics") == 1  # this scrape
    assert metric(text, "context_proxy_requests_in_flight", route="chat") == 0
    assert metric(text, "context_proxy_requests_in_flight", route="rerank") == 0
    assert metric(text, "context_proxy_build_info", python=platform.python_version()) == 1
    loaded = metric(text, "context_proxy_policy_last_load_success_timestamp_seconds")
    assert 0 < loaded <= time.time()
    for standard in ("process_cpu_seconds_total", "python_info",
                     "python_gc_collections_total"):
        assert series(text, standard), standard


def test_an_applied_reload_moves_the_last_good_load_time(make_harness, tmp_path: Path) -> None:
    s = Session(make_harness, tmp_path)
    s.client.close()
    name = "context_proxy_policy_last_load_success_timestamp_seconds"
    first = s.scrape()
    started = metric(first, name)
    assert started > 0 and metric(first, "context_proxy_policy_last_reload_successful") == 1
    (s.folder / "platform.yaml").write_text("models: [unclosed\n")  # rejected: time stays
    deadline = time.monotonic() + 5
    while metric(s.scrape(), "context_proxy_policy_reload_errors_total") == 0:
        assert time.monotonic() < deadline, "the broken file was never rejected"
        time.sleep(0.05)
    rejected = s.scrape()
    assert metric(rejected, name) == started
    assert metric(rejected, "context_proxy_policy_last_reload_successful") == 0
    (s.folder / "platform.yaml").write_text(POLICY + "# edited\n")
    while metric(s.scrape(), "context_proxy_policy_reloads_total") == 0:
        assert time.monotonic() < deadline + 5, "the fixed file was never applied"
        time.sleep(0.05)
    applied = s.scrape()
    assert metric(applied, name) > started
    assert metric(applied, "context_proxy_policy_last_reload_successful") == 1
