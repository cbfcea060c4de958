"""What the client is told agrees with what the proxy did, end to end through the openai SDK and
the fake upstream: divider figures vs headers, where the window came from, a context-length
refusal that compaction cannot help, and the no-loop wait and its metric."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from factories import synchronous_policies

from proxy.testing import agent
from proxy.testing.agent import DEMO, TOOLS
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness

MODEL = "agent-32k"
WINDOW = 32_768
NO_MASKING = "defaults:\n  masking: {enabled: false}\n"
Maker = Callable[..., Harness]
Sdk = Callable[[Harness, str], openai.OpenAI]


def policies(tmp_path: Path, text: str) -> dict[str, str]:
    """The policies folder ``text`` describes, summaries made at the trigger (not prepared)."""
    return synchronous_policies(tmp_path / "policies", text)


def start(make_harness: Maker, tmp_path: Path, yaml: str = "", **fake: Any) -> Harness:
    env = policies(tmp_path, yaml)
    return make_harness(fake=FakeUpstream(models={MODEL: WINDOW}, enforce_windows=True, **fake),
                        env=env)


def hellos(n: int) -> str:
    return " hello" * n  # one token a word in o200k_base


def conversation(turns: int) -> list[dict[str, Any]]:
    return agent.conversation(replace(DEMO, seed=5, output_tokens=(1800, 2200)), turns)


# --- 1. the divider shows the figures of the answer that made it ------------------------------


def test_divider_figures_are_the_headers_of_the_compacting_answer(
        make_harness: Maker, tmp_path: Path, sdk: Sdk) -> None:
    # The upstream counts 40% more than the proxy's tokenizer: the figures shown are corrected.
    h = start(make_harness, tmp_path, NO_MASKING, usage_scale=1.4)
    client = sdk(h, h.create_key())
    messages = conversation(9)
    headers = {"X-Conversation-Id": "figures"}
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers=headers)
    assert first.headers["X-Context-Compaction"] == "none"  # it teaches the proxy the ratio
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers=headers)
    assert raw.headers["X-Context-Compaction"] == "auto"
    dividers = client.get("/conversations/figures/dividers", cast_to=object)["data"]  # type: ignore[index]
    assert len(dividers) == 1
    divider = dividers[0]
    assert divider["id"] == raw.headers["X-Context-Divider-Id"]
    assert divider["tokens_before"] == int(raw.headers["X-Context-Tokens-Before"])
    assert divider["tokens_after"] == int(raw.headers["X-Context-Tokens-After"])
    assert divider["tokens_after"] < divider["tokens_before"]


# --- 2. where the window came from --------------------------------------------------------------


@pytest.mark.parametrize(("model", "yaml", "window", "source"), [
    (MODEL, "models: {agent-32k: {context_window: 30000}}\n", 30_000, "policy"),
    (MODEL, "", WINDOW, "upstream"),
    ("gpt-4o", "", None, "litellm"),
    ("no-such-model-anywhere", "", 200_000, "fallback"),
])
def test_every_managed_answer_says_where_the_window_came_from(
        make_harness: Maker, tmp_path: Path, sdk: Sdk, model: str, yaml: str,
        window: int | None, source: str) -> None:
    h = start(make_harness, tmp_path, yaml)
    client = sdk(h, h.create_key())
    messages = [{"role": "user", "content": "hello"}]
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)  # type: ignore[arg-type]
    assert raw.headers["X-Context-Window-Source"] == source
    if window is not None:
        assert raw.headers["X-Context-Window"] == str(window)
    else:  # litellm's own figure for the model
        assert int(raw.headers["X-Context-Window"]) >= 100_000
    # An upstream error relayed on the managed path says it too.
    h.fake.faults.append(Fault(status=503))
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    assert err.value.response.headers["X-Context-Window-Source"] == source


def test_a_limit_the_upstream_states_is_learned_and_logged_once(
        make_harness: Maker, tmp_path: Path, sdk: Sdk,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    # The policy believes the window is 64k; the upstream enforces 32k.
    h = start(make_harness, tmp_path, NO_MASKING + "models: {agent-32k: {context_window: 65536}}\n")
    client = sdk(h, h.create_key())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=conversation(20), tools=TOOLS)
    assert raw.headers["X-Context-Retried"] == "context_length_exceeded"
    assert raw.headers["X-Context-Compaction"] == "auto"
    assert raw.headers["X-Context-Window"] == str(WINDOW)
    assert raw.headers["X-Context-Window-Source"] == "learned"
    again = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert again.headers["X-Context-Window-Source"] == "learned"  # it stays in force
    learned = [r for r in caplog.records if "learned" in r.getMessage()]
    assert len(learned) == 1 and learned[0].levelno == logging.WARNING
    assert MODEL in learned[0].getMessage() and str(WINDOW) in learned[0].getMessage()
    assert h.upstream_key not in caplog.text


def test_a_refusal_compaction_cannot_help_with_is_not_sent_twice(
        make_harness: Maker, tmp_path: Path, sdk: Sdk,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    h = start(make_harness, tmp_path, NO_MASKING + "models: {agent-32k: {context_window: 65536}}\n")
    client = sdk(h, h.create_key())
    # The system prompt and the task alone are over the upstream's 32k, under the policy's
    # trigger (0.8 × 64k): forwarded, refused, and nothing may be summarized.
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Summarize:" + hellos(40_000)}]
    for turn in (1, 2):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        assert err.value.code == "context_length_exceeded"
        got = err.value.response.headers
        assert got["X-Context-Compaction"] == "insufficient"
        assert got["X-Context-Window"] == str(WINDOW)
        assert got["X-Context-Window-Source"] == "learned"
        assert "X-Context-Retried" not in got
        assert len(h.fake.chat_requests()) == turn  # the body went upstream once per request
    assert h.fake.summary_requests() == []
    assert len([r for r in caplog.records if "learned" in r.getMessage()]) == 1


# --- 3. the no-loop wait, and what the metric counts ----------------------------------------------


def test_after_insufficient_the_next_summary_waits_for_min_free_ratio(
        make_harness: Maker, tmp_path: Path, sdk: Sdk) -> None:
    # A system prompt close to the trigger (raised by it to 0.95 × 32k) on its own: every summary
    # is insufficient.
    # min free: 0.05 × 32,768 = 1,638 tokens; a keep window: 3,276.
    h = start(make_harness, tmp_path, NO_MASKING)
    client = sdk(h, h.create_key())
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Reference manual:" + hellos(28_100)},
        {"role": "user", "content": "Write the report."}]
    for t in range(8):
        messages += [{"role": "assistant", "content": f"Part {t}:" + hellos(600)},
                     {"role": "user", "content": f"Go on with part {t + 1}."}]
    outcomes, calls = [], []
    for t in range(8):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"X-Conversation-Id": "wait"})
        outcomes.append(raw.headers["X-Context-Compaction"])
        calls.append(len(h.fake.summary_requests()))
        # Each turn adds about 1,000 tokens: two turns pass the min free share, four a keep
        # window.
        messages += [{"role": "assistant", "content": f"Part {8 + t}:" + hellos(500)},
                     {"role": "user", "content": f"Go on with part {9 + t}." + hellos(500)}]
    assert outcomes == ["insufficient"] * 8
    assert calls == [1, 1, 2, 2, 3, 3, 4, 4], calls
    dividers = client.get("/conversations/wait/dividers", cast_to=object)["data"]  # type: ignore[index]
    assert len(dividers) == 4
    # Four summaries that could not get under the trigger, not eight requests.
    assert h.metric("context_proxy_compactions_total", outcome="insufficient") == 4
