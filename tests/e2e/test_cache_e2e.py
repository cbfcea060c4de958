"""Money, end to end: what a provider's prompt cache serves of what the proxy sends.

The fake upstream bills like OpenAI's prompt cache (``PromptCache``); these tests drive agent
sessions through the proxy with the openai SDK and check the proxy's own accounting against it:
``X-Context-Prefix-Kept``, the cache metrics, the stored usage, and a compacting session whose
summary calls ride the cached prefix.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.identity import conversation_key
from proxy.context.stages.shared import is_summary
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

SPEC = agent.AgentSpec(seed=5, output_tokens=(500, 2000), thought_words=(5, 20))


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "done"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


@dataclass
class Turn:
    headers: dict[str, str]
    main: dict[str, Any]  # the usage the fake reported for this turn's request
    summaries: list[dict[str, Any]]  # and for the summary calls made during it
    sent: list[dict[str, Any]]


def play(h: Harness, client: Any, script: Script, spec: agent.AgentSpec, turns: int,
         model: str, conversation: str = "c") -> list[Turn]:
    played = []
    messages = agent.opening_messages(spec)
    for assistant, results in agent.turns(spec, turns):
        script.next = assistant
        start = len(h.fake.requests)
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, tools=agent.TOOLS,
            extra_headers={"X-Conversation-Id": conversation})
        raw.parse()
        new = [r for r in h.fake.requests[start:] if r.path == "/v1/chat/completions"]
        main = [r for r in new if not is_summary_request(r.json)]
        assert len(main) == 1
        played.append(Turn(dict(raw.headers), main[0].usage or {},
                           [r.usage or {} for r in new if is_summary_request(r.json)],
                           main[0].json["messages"]))
        messages = [*messages, assistant, *results]
    return played


def play_masking_off(make_harness: Any, sdk: Any, window: int, output_tokens: tuple[int, int],
                     fact: str, turns: int) -> tuple[Harness, agent.AgentSpec, list[Turn]]:
    """A session at ``window`` with masking switched off by the platform, ``fact`` planted in
    the third turn's tool output."""
    model, script = f"gpt-4o-w{window // 1000}k", Script()
    spec = replace(SPEC, output_tokens=output_tokens, facts=((3, f"NOTE: ledger id {fact}."),))
    layer = validate_layer({"masking.enabled": False})
    h = make_harness(fake=FakeUpstream(models={model: window}, responder=script.respond),
                     platform=PlatformConfig(defaults=layer))
    return h, spec, play(h, sdk(h, h.create_key()), script, spec, turns, model)


def cached(usage: dict[str, Any]) -> int:
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


def test_prefix_kept_matches_what_the_cache_serves(make_harness: Any, sdk: Any) -> None:
    model, script = "gpt-4o-w64k", Script()
    h = make_harness(fake=FakeUpstream(models={model: 64_000}, responder=script.respond))
    played = play(h, sdk(h, h.create_key()), script, SPEC, 60, model)
    compared = steps = 0
    for before, now in itertools.pairwise(played):
        kept, served = int(now.headers["x-context-prefix-kept"]), cached(now.main)
        assert now.headers["x-context-compaction"] == "none"
        if served or kept >= 1024 + 128:
            assert abs(kept - served) <= max(0.02 * served, 128), (kept, served)
            compared += 1
        if int(now.headers["x-context-masked"]) > int(before.headers["x-context-masked"]):
            steps += 1
            assert kept < int(before.main["prompt_tokens"]) // 2  # a step rewrote the prefix
        else:
            assert kept >= int(before.main["prompt_tokens"]) - 3 - 1  # all of it was kept
    assert compared > 40 and 2 <= steps <= 8
    calls = [t.main for t in played] + [s for t in played for s in t.summaries]
    assert h.metric("context_proxy_upstream_prompt_tokens_total", model=model) == \
        sum(u["prompt_tokens"] for u in calls)
    assert h.metric("context_proxy_upstream_cached_tokens_total", model=model) == \
        sum(cached(u) for u in calls)
    assert h.metric("context_proxy_prefix_rewrites_total", stage="mask") == steps
    assert h.metric("context_proxy_prefix_rewrites_total", stage="compact") == 0
    h.call(h.state.context.records.flush_usage())
    totals = h.state.context.records.usage_totals(conversation_key("acme", "c"))
    assert totals[model]["requests"] == 60
    assert totals[model]["prompt_tokens"] == sum(t.main["prompt_tokens"] for t in played)
    assert totals[model]["cached_tokens"] == sum(cached(t.main) for t in played)


def test_in_steps_off_rewrites_nearly_every_turn(make_harness: Any, sdk: Any) -> None:
    model, script = "gpt-4o-w64k", Script()
    layer = validate_layer({"masking.in_steps": False})
    h = make_harness(fake=FakeUpstream(models={model: 64_000}, responder=script.respond),
                     platform=PlatformConfig(defaults=layer))
    played = play(h, sdk(h, h.create_key()), script, SPEC, 60, model)
    rewrites = h.metric("context_proxy_prefix_rewrites_total", stage="mask")
    over = sum(1 for t in played if int(t.headers["x-context-masked"]) > 0)
    assert rewrites >= over - 2 > 20


def test_a_compacting_session_rides_the_cache_and_keeps_its_facts(make_harness: Any,
                                                                   sdk: Any) -> None:
    """Masking switched off by the platform, 40 turns at 32k: every summary call is served
    mostly from cache, the facts of the covered range reach the upstream through the summary,
    and the system prompt, the task and the newest plan pair stay verbatim on every turn."""
    fact = "REFUND-LEDGER-3141"
    h, spec, played = play_masking_off(make_harness, sdk, 32_000, (800, 2400), fact, 40)
    summaries = [s for t in played for s in t.summaries]
    assert len(summaries) >= 2
    for s in summaries:
        assert cached(s) >= 0.7 * s["prompt_tokens"], s
    compacted = [t for t in played if t.headers["x-context-compaction"] == "auto"]
    assert len(compacted) == len(summaries)
    opening = agent.opening_messages(spec)
    for t in played:
        assert t.sent[:len(opening)] == opening  # system prompt, task, memory: verbatim
        calls = [m for m in t.sent if m.get("tool_calls") and any(
            c["function"]["name"] == "write_todos" for c in m["tool_calls"])]
        if calls:
            i = t.sent.index(calls[-1])
            assert t.sent[i + 1]["role"] == "tool"  # the plan pair stays whole
    after = [t for t in played if any(is_summary(m) for m in t.sent)]
    assert after and all(fact in next(m["content"] for m in t.sent if is_summary(m))
                         for t in after)
    assert h.metric("context_proxy_prefix_rewrites_total", stage="compact") == \
        len(compacted)


def test_summary_calls_ride_the_covered_range_when_the_whole_list_does_not_fit(
        make_harness: Any, sdk: Any) -> None:
    """At 16k with 1-4k-token outputs the list as sent, this turn's results included, leaves no
    room for the summary's answer: the summary call sends only the covered range (a prefix of
    the previous request), so it is one call per compaction, served mostly from cache, and the
    facts of the covered range still reach the summary."""
    fact = "REFUND-LEDGER-2718"
    h, _, played = play_masking_off(make_harness, sdk, 16_000, (1000, 4000), fact, 24)
    compacted = [t for t in played if t.headers["x-context-compaction"] == "auto"]
    assert len(compacted) >= 3
    for t in compacted:
        assert len(t.summaries) == 1
        s = t.summaries[0]
        assert cached(s) >= 0.9 * s["prompt_tokens"], s
    bodies = [r.json for r in h.fake.requests if r.path == "/v1/chat/completions"]
    for before, body in itertools.pairwise(bodies):
        if is_summary_request(body):  # the previous request's leading messages, then the ask
            assert not is_summary_request(before)
            assert before["messages"][:len(body["messages"]) - 1] == body["messages"][:-1]
    first = next(t for t in played if any(is_summary(m) for m in t.sent))
    assert fact in next(m["content"] for m in first.sent if is_summary(m))


def test_no_two_consecutive_turns_summarize_unless_the_second_would_not_fit(
        make_harness: Any, sdk: Any) -> None:
    """At 32k with 4-16k-token outputs one result may fill half the window: a compaction that
    would not last two turns waits while the request fits, so a turn right after a summary
    makes another only when its request would not fit without it (over 95% of the window)."""
    model, script = "gpt-4o-w32k", Script()
    spec = agent.AgentSpec(seed=11, output_tokens=(4000, 16000), thought_words=(10, 40))
    h = make_harness(fake=FakeUpstream(models={model: 32_000}, responder=script.respond))
    played = play(h, sdk(h, h.create_key()), script, spec, 24, model)
    summarized = [i for i, t in enumerate(played) if t.summaries]
    assert len(summarized) >= 4
    for t in played:
        assert t.main["prompt_tokens"] <= 32_000
    for before, now in itertools.pairwise(summarized):
        if now == before + 1:  # the list as sent last turn, grown by this turn's messages
            grown = played[before].main["prompt_tokens"] + \
                int(played[now].headers["x-context-tokens-before"]) - \
                int(played[before].headers["x-context-tokens-before"])
            assert grown > 0.95 * 32_000, (before, now, grown)
