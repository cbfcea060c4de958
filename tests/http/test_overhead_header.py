"""``X-Context-Overhead-Ms``: the proxy's own time on every answer of every managed route,
whole and streamed, its own refusals included; the upstream's time and the summary calls'
are not in it (SPEC section 6)."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from proxy.context.accounting import overhead
from proxy.testing import agent
from proxy.testing.agent import DEMO, TOOLS
from proxy.testing.fake.faults import Fault
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

HEADER = "X-Context-Overhead-Ms"
CHAT = [{"role": "user", "content": "Hello"}]


def own_ms(headers: httpx.Headers) -> float:
    value = float(headers[HEADER])
    assert value >= 0 and headers[HEADER] == f"{value:.2f}"
    return value


def test_every_managed_answer_says_the_proxy_time(harness: Harness, key: str) -> None:
    with openai.OpenAI(base_url=harness.base_url, api_key=key, max_retries=0) as oa:
        own_ms(oa.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=CHAT).headers)  # type: ignore[arg-type]
        with oa.chat.completions.with_streaming_response.create(
                model="gpt-4o", messages=CHAT, stream=True) as streamed:  # type: ignore
            own_ms(streamed.headers)
        own_ms(oa.responses.with_raw_response.create(model="gpt-4o", input="Hi").headers)
        with oa.responses.with_streaming_response.create(model="gpt-4o", input="Hi",
                                                         stream=True) as streamed_r:
            own_ms(streamed_r.headers)
    with anthropic.Anthropic(base_url=harness.base_url.removesuffix("/v1"), api_key=key,
                             max_retries=0) as an:
        own_ms(an.messages.with_raw_response.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=CHAT).headers)  # type: ignore
        with an.messages.with_streaming_response.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=CHAT,  # type: ignore
                stream=True) as streamed_m:
            own_ms(streamed_m.headers)


def test_the_proxy_refusals_carry_it_too(harness: Harness, key: str) -> None:
    for path, body, auth in (("/chat/completions", {"model": "gpt-4o"}, key),
                             ("/responses", {"model": ""}, key),
                             ("/messages", {"model": "m", "messages": []}, "cp-wrong")):
        r = httpx.post(harness.base_url + path, json=body,
                       headers={"Authorization": f"Bearer {auth}", "x-api-key": auth})
        assert r.status_code in (400, 401), r.text
        own_ms(r.headers)
    relayed = httpx.get(harness.base_url + "/models", headers={"Authorization": f"Bearer {key}"})
    assert HEADER not in relayed.headers  # a relayed route: the proxy manages nothing there


def test_summary_calls_are_not_the_proxy_time(make_harness: Callable[..., Harness],
                                              tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "platform.yaml").write_text("defaults:\n  masking: {enabled: false}\n")
    fake = FakeUpstream(models={"agent-32k": 32_768}, enforce_windows=True, summary_delay_s=1.5)
    h = make_harness(fake=fake, env={"CONTEXT_PROXY_POLICIES": str(folder)})
    messages = agent.conversation(replace(DEMO, seed=5, output_tokens=(1800, 2200)), 14)
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0) as oa:
        raw = oa.chat.completions.with_raw_response.create(
            model="agent-32k", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert raw.headers["X-Context-Compaction"] == "auto"
    # The 1.5 s the summary call took is the upstream's, not the proxy's.
    assert own_ms(raw.headers) < 1500


def test_the_upstream_wait_is_not_the_proxy_time(make_harness: Callable[..., Harness]) -> None:
    """An upstream that takes 400 ms to answer, on every API, whole and streamed, and one that
    drips its whole answer for longer: the waits are the upstream's; the header is the rest."""
    slow = [Fault(status=200, delay_s=0.4, times=-1, path=path)
            for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages")]
    h = make_harness(fake=FakeUpstream(faults=slow))
    key = h.create_key("acme")
    said: list[float] = []
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as oa:
        said.append(own_ms(oa.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=CHAT).headers))  # type: ignore[arg-type]
        with oa.chat.completions.with_streaming_response.create(
                model="gpt-4o", messages=CHAT, stream=True) as streamed:  # type: ignore
            said.append(own_ms(streamed.headers))
        said.append(own_ms(oa.responses.with_raw_response.create(
            model="gpt-4o", input="Hi").headers))
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"), api_key=key,
                             max_retries=0) as an:
        said.append(own_ms(an.messages.with_raw_response.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=CHAT).headers))  # type: ignore
    assert max(said) < 300, said
    h.fake.faults[:] = [Fault(status=200, mode="drip", times=-1)]  # 16 bytes every 2 ms
    h.fake.responder = lambda body: {"role": "assistant", "content": "long answer " * 150}
    took = time.perf_counter()
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as oa:
        dripped = oa.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=CHAT)  # type: ignore[arg-type]
    took = time.perf_counter() - took
    assert own_ms(dripped.headers) < took * 1000 / 2


def test_the_histogram_books_what_the_header_says(harness: Harness, key: str) -> None:
    with openai.OpenAI(base_url=harness.base_url, api_key=key, max_retries=0) as oa:
        said = own_ms(oa.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=CHAT).headers)  # type: ignore[arg-type]
    assert harness.metric("context_proxy_overhead_seconds_count", route="chat") == 1
    assert harness.metric("context_proxy_overhead_seconds_sum", route="chat") == \
        pytest.approx(said / 1000, abs=0.00001)


def test_the_stopwatch_leaves_out_what_it_is_told() -> None:
    watch = overhead.Stopwatch(arrived=10.0)
    watch.excluded = 2.0
    assert watch.own(12.5) == 0.5
    booked: list[float] = []

    def one_request() -> None:
        watch = overhead.begin(time.perf_counter() - 4.0)
        overhead.waited(time.perf_counter() - 1.0)  # an upstream call that took a second
        assert 0.99 < watch.excluded < 1.5
        first = overhead.stamp(booked.append)
        overhead.stamp(booked.append)  # booked once per request
        assert len(booked) == 1 and 2500 <= float(first) < 3100

    contextvars.copy_context().run(one_request)
    assert overhead.milliseconds(0.00075) == "0.75"
