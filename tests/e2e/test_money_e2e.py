"""Money through the real SDKs on each API: the fake upstream's reported usage (cache reads and
writes included), priced by hand at the policy's prices, equals what the proxy states in
``X-Context-Cost-*`` headers, books in the store (per conversation and per organization, which
the console shows) and counts in ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest
from factories import SEED_STEPS, assistant, system, tool_turn, user, words

from proxy.console.queries import usage_by_org
from proxy.context.identity import conversation_key
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing.fake import fake_apis
from proxy.testing.fake_upstream import FakeUpstream, Recorded, is_summary_request
from proxy.testing.harness import Harness

MODEL = "priced-model"
PRICES = {"input_per_mtok": 2.0, "cached_per_mtok": 0.2, "write_per_mtok": 2.5,
          "output_per_mtok": 10.0}
TOKEN = "admin-token-for-money-0123456789"
Usage = tuple[int, int, int, int]  # prompt (reads and writes included), read, written, output


def _harness(make_harness: Callable[..., Harness], window: int) -> Harness:
    platform = PlatformConfig(defaults=validate_layer({"models": {MODEL: {
        "context_window": window, **PRICES}}, **SEED_STEPS}))
    return make_harness(fake=FakeUpstream(models={MODEL: window}), platform=platform,
                        env={"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN})


def _usage(rec: Recorded) -> Usage:
    u = rec.usage or {}
    if rec.path == "/v1/messages":
        read, written = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        return u["input_tokens"] + read + written, read, written, u["output_tokens"]
    if rec.path == "/v1/responses":
        d = u["input_tokens_details"]
        return u["input_tokens"], d["cached_tokens"], d["cache_write_tokens"], u["output_tokens"]
    d = u["prompt_tokens_details"]
    return u["prompt_tokens"], d["cached_tokens"], d["cache_write_tokens"], u["completion_tokens"]


def _dollars(u: Usage) -> float:
    prompt, read, written, output = u
    return ((prompt - read - written) * PRICES["input_per_mtok"]
            + read * PRICES["cached_per_mtok"] + written * PRICES["write_per_mtok"]
            + output * PRICES["output_per_mtok"]) / 1e6


def _without(turns: list[tuple[Usage, int, int, bool]]) -> list[float]:
    """What each client request would have cost without the proxy (docs/headers.md, "Money
    spent and saved"), from the upstream's usage, the tokens before/after headers and whether
    the upstream received the client's own messages."""
    out, previous, previous_as_sent = [], None, True
    for u, before, after, as_sent in turns:
        prompt, read, written, output = u
        if as_sent and previous_as_sent:
            out.append(_dollars(u))
        else:
            mine = prompt if before == after else round(prompt * before / after)
            cached = min(mine, previous) if previous is not None and (read or written) else 0
            out.append(_dollars((mine, cached, mine - cached if written else 0, output)))
        previous = prompt if before == after else round(prompt * before / after)
        previous_as_sent = as_sent
    return out


def _main(h: Harness, path: str) -> list[Recorded]:
    return [r for r in h.fake.requests if r.path == path and r.usage is not None
            and not is_summary_request(fake_apis.as_chat(path, r.json) if path != "/v1/chat"
                                       "/completions" else r.json)]


def _check_books(h: Harness, conversation: str, path: str,
                 turns: list[tuple[Usage, int, int, bool]], headers: list[Any]) -> None:
    """Headers, store, console and metrics against the fake's usage priced by hand."""
    h.settle()  # the last answer's usage is booked after the client has it
    every = [r for r in h.fake.requests if r.path == path and r.usage is not None]
    spent = sum(_dollars(_usage(r)) for r in every)  # summary calls included
    without = _without(turns)
    for (u, _, _, _), got, mine in zip(turns, headers, without, strict=True):
        assert abs(int(got["x-context-cost-spent"]) - round(_dollars(u) * 1e6)) <= 1
        assert abs(int(got["x-context-cost-saved"]) - round((mine - _dollars(u)) * 1e6)) <= 1
    assert sum(_usage(r)[2] for r in every) > 0  # the session wrote to the prompt cache
    totals = h.state.context.records.usage_totals(conversation_key("acme", conversation))
    assert totals[MODEL]["cost_spent_usd"] == pytest.approx(spent)
    assert totals[MODEL]["cost_without_usd"] == pytest.approx(sum(without))
    assert totals[MODEL]["cache_write_tokens"] + totals[MODEL]["summary_cache_write_tokens"] \
        == sum(_usage(r)[2] for r in every)
    assert h.metric("context_proxy_cost_spent_usd_total", model=MODEL) == pytest.approx(spent)
    assert h.metric("context_proxy_cost_without_proxy_usd_total", model=MODEL) == \
        pytest.approx(sum(without))
    assert h.metric("context_proxy_upstream_cache_write_tokens_total", model=MODEL) == \
        sum(_usage(r)[2] for r in every)
    h.call(h.state.context.records.flush_usage())
    org = usage_by_org(h.state.store)["acme"].org
    assert org.spent == pytest.approx(spent) and org.saved == pytest.approx(sum(without) - spent)
    with httpx.Client(base_url=h.base_url.removesuffix("/v1") + "/admin/ui/") as c:
        assert c.post("login", data={"token": TOKEN}).status_code == 303
        page = c.get("").text
    assert f'<dd class="money-spent">${spent:,.4f}</dd>' in page
    saved = sum(without) - spent
    assert f'<dd class="money-saved">{"-" if saved < 0 else ""}${abs(saved):,.4f}</dd>' in page


def test_chat_completions_money_with_masking(make_harness: Callable[..., Harness],
                                             sdk: Callable[[Harness, str], openai.OpenAI]
                                             ) -> None:
    h = _harness(make_harness, 9000)
    client = sdk(h, h.create_key("acme"))
    messages: list[Any] = [system(), user("Fix the build. " + words(1200))]
    turns, headers = [], []
    for n in range(7):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"X-Conversation-Id": "chat-money"})
        raw.parse()
        rec = _main(h, "/v1/chat/completions")[-1]
        turns.append((_usage(rec), int(raw.headers["x-context-tokens-before"]),
                      int(raw.headers["x-context-tokens-after"]),
                      rec.json["messages"] == messages))
        headers.append(raw.headers)
        messages += tool_turn("read_file", words(900, seed=n))
        messages.append(assistant(f"Read part {n}."))
        messages.append(user("Go on."))
    assert not all(t[3] for t in turns)  # masking rewrote some requests: "without" differs
    assert any(int(hd["x-context-cost-saved"]) != 0 for hd in headers)
    _check_books(h, "chat-money", "/v1/chat/completions", turns, headers)


def test_responses_money(make_harness: Callable[..., Harness],
                         sdk: Callable[[Harness, str], openai.OpenAI]) -> None:
    h = _harness(make_harness, 200_000)
    client = sdk(h, h.create_key("acme"))
    items: list[Any] = [{"role": "user", "content": "Plan the release. " + words(1500)}]
    turns, headers = [], []
    for n in range(3):
        raw = client.responses.with_raw_response.create(
            model=MODEL, input=items, extra_headers={"X-Conversation-Id": "responses-money"})
        answer = raw.parse()
        rec = _main(h, "/v1/responses")[-1]
        turns.append((_usage(rec), int(raw.headers["x-context-tokens-before"]),
                      int(raw.headers["x-context-tokens-after"]), rec.json["input"] == items))
        headers.append(raw.headers)
        items += [{"role": "assistant", "content": answer.output_text or "ok"},
                  {"role": "user", "content": f"Next step {n}. " + words(300, seed=n)}]
    assert all(t[3] for t in turns)  # nothing to manage: spent is what it would have cost
    _check_books(h, "responses-money", "/v1/responses", turns, headers)


def test_messages_money_with_cache_control(make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, 200_000)
    messages: list[Any] = []
    turns, headers = [], []
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                             api_key=h.create_key("acme"), max_retries=0) as client:
        for n in range(3):
            text = ("Review this diff. " + words(1500)) if n == 0 else f"And then {n}?"
            messages.append({"role": "user", "content": [{
                "type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]})
            for m in messages[:-1]:  # one marker, on the newest turn, as Claude Code does
                if m["role"] == "user":
                    m["content"] = [{k: v for k, v in b.items() if k != "cache_control"}
                                    for b in m["content"]]
            raw = client.messages.with_raw_response.create(
                model=MODEL, max_tokens=256, messages=messages,
                extra_headers={"X-Conversation-Id": "messages-money"})
            answer = raw.parse()
            rec = _main(h, "/v1/messages")[-1]
            turns.append((_usage(rec), int(raw.headers["x-context-tokens-before"]),
                          int(raw.headers["x-context-tokens-after"]),
                          rec.json["messages"] == messages))
            headers.append(raw.headers)
            messages.append({"role": "assistant",
                             "content": [{"type": "text", "text": answer.content[0].text}]})
    assert turns[0][0][2] > 0 and turns[1][0][1] > 0  # written, then read
    _check_books(h, "messages-money", "/v1/messages", turns, headers)


def test_a_streamed_answer_states_its_estimate_and_books_the_reported_usage(
        make_harness: Callable[..., Harness], sdk: Callable[[Harness, str], openai.OpenAI]
) -> None:
    h = _harness(make_harness, 200_000)
    client = sdk(h, h.create_key("acme"))
    messages: list[Any] = [system(), user("Summarize the incident. " + words(1400))]
    seen = []
    for _ in range(2):
        with client.chat.completions.with_streaming_response.create(
                model=MODEL, messages=messages, stream=True,
                stream_options={"include_usage": True},
                extra_headers={"X-Conversation-Id": "streamed"}) as raw:
            list(raw.iter_lines())
            seen.append(raw.headers)
            assert raw.headers["x-context-cost-saved"] == "0"  # sent as the client sent it
        messages += [assistant("Noted."), user("More.")]
    h.settle()
    recs = _main(h, "/v1/chat/completions")
    assert _usage(recs[0])[2] > 0  # the first answer reported cache writes
    for n, hd in enumerate(seen):
        # The prompt side: what was sent, its kept prefix read from cache, the rest written once
        # the conversation's previous answer reported writes (the first has no previous).
        after, kept = int(hd["x-context-tokens-after"]), int(hd["x-context-prefix-kept"])
        rest = PRICES["write_per_mtok"] if n else PRICES["input_per_mtok"]
        assert abs(int(hd["x-context-cost-spent"])
                   - round(kept * PRICES["cached_per_mtok"] + (after - kept) * rest)) <= 1
    assert int(seen[1]["x-context-prefix-kept"]) > 0
    totals = h.state.context.records.usage_totals(conversation_key("acme", "streamed"))
    assert totals[MODEL]["cost_spent_usd"] == pytest.approx(
        sum(_dollars(_usage(r)) for r in recs))
