"""Context management in the live path, end to end through the openai SDK."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from factories import SEED_STEPS_YAML, reachable, seed_steps_platform

from proxy.context.stages.mask import spill_id as spill_id_of
from proxy.context.stages.ordering import ordering_problems
from proxy.context.stages.shared import is_summary
from proxy.context.tokens.counter import TokenCounter
from proxy.testing import agent
from proxy.testing.agent import DEMO, DEMO_FACT, MEMORY, SYSTEM, TASK, TOOLS
from proxy.testing.fake_upstream import FakeUpstream, Fault, is_summary_request
from proxy.testing.harness import Harness

MODEL = "agent-32k"
WINDOW = 32_768
FACTS = ["AZURE-FALCON-42", "CUST-7781", "BILLING-CI-9", DEMO_FACT]


def session(seed: int, sizes: tuple[int, int]) -> agent.AgentSpec:
    """The demo's agent session (its opening, tools and buried fact) with another seed and
    tool outputs of ``sizes`` tokens."""
    return replace(DEMO, seed=seed, output_tokens=sizes)


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "done"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def policies(tmp_path: Path, text: str) -> dict[str, str]:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "platform.yaml").write_text(text)
    return {"CONTEXT_PROXY_POLICIES": str(folder)}


def start(make_harness: Callable[..., Harness], **fake: Any) -> tuple[Harness, Script]:
    script = Script()
    env = fake.pop("env", None)
    settings = fake.pop("settings", {})
    if env is None:  # these sessions are about what masking does: the seed's steps
        settings.setdefault("platform", seed_steps_platform())
    h = make_harness(fake=FakeUpstream(models={MODEL: WINDOW}, responder=script.respond,
                                       enforce_windows=True, **fake), env=env, **settings)
    return h, script


def newest_plan_pair(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i in range(len(messages) - 1, -1, -1):
        calls = messages[i].get("tool_calls") or []
        if any(c["function"]["name"] == "write_todos" for c in calls):
            ids = {c["id"] for c in calls}
            return [messages[i], *(m for m in messages[i + 1:]
                                   if m.get("role") == "tool" and m["tool_call_id"] in ids)]
    return []


def contains_run(haystack: list[dict[str, Any]], run: list[dict[str, Any]]) -> bool:
    return any(haystack[i:i + len(run)] == run for i in range(len(haystack) - len(run) + 1))


def test_long_agent_session_stays_inside_the_window(make_harness, sdk) -> None:
    h, script = start(make_harness)
    client = sdk(h, h.create_key())
    counter = TokenCounter()
    spec = session(11, (1000, 4000))
    messages = agent.opening_messages(spec)
    outcomes: list[str] = []
    sent = received = 0
    trigger = 0.80 * WINDOW
    for turn, (assistant, results) in enumerate(agent.turns(spec, 150), start=1):
        script.next = assistant
        summaries_before = len(h.fake.summary_requests())
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=TOOLS,
            extra_headers={"X-Conversation-Id": "long-session"})
        raw.parse()
        got = h.fake.chat_requests()[-1]["messages"]
        outcome = raw.headers["X-Context-Compaction"]
        outcomes.append(outcome)
        assert counter.count_messages(got, MODEL, TOOLS) <= trigger
        assert ordering_problems(got) == []
        assert got[0] == {"role": "system", "content": SYSTEM}
        assert got[1] == {"role": "user", "content": TASK}
        assert {"role": "user", "content": MEMORY} in got
        plan = newest_plan_pair(messages)
        assert not plan or contains_run(got, plan)
        made_summary = len(h.fake.summary_requests()) > summaries_before
        assert made_summary == (outcome == "auto"), (turn, outcome)
        assert outcome in ("none", "reused", "auto")
        sent += counter.count_messages(messages, MODEL, TOOLS)
        received += counter.count_messages(got, MODEL, TOOLS)
        messages += [assistant, *results]
    final = json.dumps(got)
    for fact in FACTS:  # in the request, or in a spill it names
        assert reachable(h.base_url, client.api_key, "long-session", final, fact), fact
    autos = outcomes.count("auto")
    assert autos >= 2  # the second summary rolls the first one forward
    assert outcomes[outcomes.index("auto") + 1:].count("none") == 0  # reuse from then on
    dividers = client.get("/conversations/long-session/dividers", cast_to=object)
    assert len(dividers["data"]) == autos  # type: ignore[index]
    print(f"\n150 turns: client sent {sent:,} tokens, upstream received {received:,} "
          f"({1 - received / sent:.0%} less); {autos} compactions, "
          f"{len(h.fake.summary_requests())} summary calls")


def crossing_conversation(rng_seed: int = 5, turns: int = 14) -> list[dict[str, Any]]:
    return agent.conversation(session(rng_seed, (1800, 2200)), turns)


def big_conversation() -> list[dict[str, Any]]:
    """Over the compaction trigger even after masking (the five newest results are large)."""
    return agent.conversation(session(3, (5000, 6000)), 10)


NO_MASKING = "defaults:\n  masking: {enabled: false}\n"


async def test_concurrent_requests_share_one_summary(make_harness, tmp_path: Path) -> None:
    # A summary model with a large window, so the summary is one call (not pieces and a merge).
    h, _script = start(make_harness, summary_delay_s=0.5, env=policies(
        tmp_path, NO_MASKING + "  compaction: {summary_model: summarizer-128k}\n"
        "models: {summarizer-128k: {context_window: 131072}}\n"))
    messages = crossing_conversation()
    client = openai.AsyncOpenAI(base_url=h.base_url, api_key=h.create_key(), max_retries=0)

    async def one() -> str:
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Conversation-Id": "busy"})
        return raw.headers["X-Context-Compaction"]

    async with client:
        outcomes = await asyncio.gather(*(one() for _ in range(10)))
    assert sorted(outcomes) == ["auto"] + ["reused"] * 9
    assert len(h.fake.summary_requests()) == 1
    received = h.fake.chat_requests()
    assert len(received) == 10
    assert all(r["messages"] == received[0]["messages"] for r in received)
    assert any(is_summary(m) for m in received[0]["messages"])
    assert h.fake.summary_requests()[0]["model"] == "summarizer-128k"


@pytest.mark.parametrize("fault", ["timeout", "error", "empty"])
def test_failed_summary_fails_open(make_harness, tmp_path: Path, fault: str, sdk) -> None:
    fake: dict[str, Any] = {}
    # Only the timeout case needs a short timeout; the others get one no busy machine misses
    # (the retry after the failure must compact).
    timeout_s = 1.0 if fault == "timeout" else 10.0
    if fault == "timeout":
        fake["summary_delay_s"] = 4.0
    elif fault == "error":
        fake["faults"] = [Fault(status=500, match=is_summary_request, times=1)]
    else:
        calls = {"n": 0}

        def empty_once(body: dict[str, Any]) -> str:
            calls["n"] += 1
            return "   " if calls["n"] == 1 else "Recovered summary FACT-77."

        fake["summarizer"] = empty_once
    h, _script = start(make_harness, env=policies(
        tmp_path, f"defaults:\n  compaction: {{summary_timeout_s: {timeout_s}}}\n"
        f"  {SEED_STEPS_YAML}\n"), **fake)
    client = sdk(h, h.create_key())
    messages = big_conversation()
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "f"})
    assert raw.status_code == 200
    assert raw.headers["X-Context-Compaction"] == "failed"
    assert "X-Context-Divider-Id" not in raw.headers
    got = h.fake.chat_requests()[-1]["messages"]
    assert not any(is_summary(m) for m in got)
    assert int(raw.headers["X-Context-Masked"]) > 0 and len(got) == len(messages)
    assert client.get("/conversations/f/dividers", cast_to=object)["data"] == []  # type: ignore[index]
    assert h.metric("context_proxy_compactions_total", outcome="failed") == 1
    if fault == "timeout":
        h.fake.summary_delay_s = 0.0
    again = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "f"})
    assert again.headers["X-Context-Compaction"] == "auto"
    assert len(client.get("/conversations/f/dividers", cast_to=object)["data"]) == 1  # type: ignore[index]


def post_json(h: Harness, key: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(h.base_url + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {key}",
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_manual_compaction_is_off_by_default(make_harness) -> None:
    h, _ = start(make_harness)
    key = h.create_key()
    status, body = post_json(h, key, "/conversations/c1/compact",
                             {"model": MODEL, "messages": crossing_conversation(turns=2)})
    assert status == 403 and body["error"]["code"] == "manual_compaction_disabled"


def test_manual_compaction(make_harness, sdk) -> None:
    h, _script = start(make_harness, settings={"manual_compaction": True})
    key = h.create_key()
    client = sdk(h, key)
    headers = {"X-Conversation-Id": "m1"}
    first = agent.opening_messages(DEMO)
    client.chat.completions.create(model=MODEL, messages=first, extra_headers=headers)
    status, body = post_json(h, key, "/conversations/m1/compact",
                             {"model": MODEL, "messages": first})
    assert status == 409 and body["error"]["code"] == "nothing_to_compact"
    assert client.get("/conversations/m1/dividers", cast_to=object)["data"] == []  # type: ignore[index]
    assert h.fake.summary_requests() == []

    messages = crossing_conversation(turns=4)  # below the trigger, with assistant turns
    status, body = post_json(h, key, "/conversations/m1/compact",
                             {"model": MODEL, "messages": messages, "tools": TOOLS})
    assert status == 200, body
    assert body["divider"]["kind"] == "manual"
    assert body["divider"]["text"] == "Context summarized on request"
    assert any(is_summary(m) for m in body["messages"])
    assert ordering_problems(body["messages"]) == []
    assert len(h.fake.summary_requests()) == 1

    messages += [{"role": "assistant", "content": "noted"}, {"role": "user", "content": "go on"}]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers=headers)
    assert raw.headers["X-Context-Compaction"] == "reused"
    got = h.fake.chat_requests()[-1]["messages"]
    assert got[:len(body["messages"])] == body["messages"]
    assert len(h.fake.summary_requests()) == 1
    dividers = client.get("/conversations/m1/dividers", cast_to=object)["data"]  # type: ignore[index]
    assert [d["kind"] for d in dividers] == ["manual"]


def test_compact_now_header(make_harness, sdk) -> None:
    h, _ = start(make_harness, settings={"manual_compaction": True})
    client = sdk(h, h.create_key())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=crossing_conversation(turns=4), tools=TOOLS,
        extra_headers={"X-Conversation-Id": "m2", "X-Context-Compact": "now"})
    assert raw.headers["X-Context-Compaction"] == "manual"
    assert raw.headers["X-Context-Divider-Id"].startswith("div_")


def test_other_organizations_never_see_a_conversation(make_harness, sdk) -> None:
    h, _ = start(make_harness, settings={"manual_compaction": True})
    owner, other = h.create_key("acme"), h.create_key("globex")
    client = sdk(h, owner)
    messages = big_conversation()
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "x"})
    assert raw.headers["X-Context-Compaction"] == "auto"
    masked_original = next(m for m in messages if m.get("role") == "tool"
                           and len(m["content"]) > 1000)  # the oldest large tool result
    spill_id = spill_id_of(masked_original["content"])
    mine = client.get(f"/conversations/x/spills/{spill_id}", cast_to=object)
    assert mine["content"] == masked_original["content"]  # type: ignore[index]
    intruder = sdk(h, other)
    for path in ("/conversations/x/dividers", f"/conversations/x/spills/{spill_id}"):
        with pytest.raises(openai.NotFoundError):
            intruder.get(path, cast_to=object)
    # Summarize now under the same id compacts the other organization's own conversation x
    # (its body holds the messages); the owner's records stay as they were.
    status, body = post_json(h, other, "/conversations/x/compact",
                             {"model": MODEL, "messages": messages})
    assert status == 200 and body["divider"]["kind"] == "manual"
    owners = client.get("/conversations/x/dividers", cast_to=object)["data"]  # type: ignore[index]
    assert [d["kind"] for d in owners] == ["auto"]
    theirs = intruder.get("/conversations/x/dividers", cast_to=object)["data"]  # type: ignore[index]
    assert [d["kind"] for d in theirs] == ["manual"]


def test_stream_gets_headers_and_comment(make_harness, sdk) -> None:
    h, _ = start(make_harness)
    client = sdk(h, h.create_key())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=big_conversation(), tools=TOOLS, stream=True,
        extra_headers={"X-Conversation-Id": "s"})
    assert raw.headers["X-Context-Compaction"] == "auto"
    text = raw.http_response.read().decode()
    assert text.startswith(": context-compacted kind=auto divider=div_")
    assert text.rstrip().endswith("data: [DONE]")


def test_reactive_retry_when_upstream_says_too_long(make_harness, tmp_path: Path, sdk) -> None:
    # The policy believes the window is 64k; the upstream enforces 32k.
    h, _ = start(make_harness, env=policies(tmp_path, NO_MASKING + "models: {agent-32k: "
                                            "{context_window: 65536}}\n"))
    client = sdk(h, h.create_key())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=crossing_conversation(turns=20), tools=TOOLS)
    assert raw.status_code == 200
    assert raw.headers["X-Context-Retried"] == "context_length_exceeded"
    assert raw.headers["X-Context-Compaction"] == "auto"


def test_upstream_usage_corrects_later_estimates(make_harness, tmp_path: Path, sdk) -> None:
    # The upstream counts 40% more than our tokenizer: the proxy must compact earlier.
    h, _ = start(make_harness, usage_scale=1.4, env=policies(tmp_path, NO_MASKING))
    client = sdk(h, h.create_key())
    messages = crossing_conversation(turns=9)  # under 0.8 × 32k by our count, over × 1.4
    assert 0.8 * WINDOW / 1.4 < TokenCounter().count_messages(messages, MODEL, TOOLS) \
        < 0.8 * WINDOW
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "u"})
    assert first.headers["X-Context-Compaction"] == "none"
    second = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "u"})
    assert second.headers["X-Context-Compaction"] == "auto"
    assert int(second.headers["X-Context-Tokens-Before"]) > \
        int(first.headers["X-Context-Tokens-Before"])


def test_metrics_move_by_the_right_amount(make_harness, sdk) -> None:
    h, _ = start(make_harness)
    client = sdk(h, h.create_key("acme"))
    messages = big_conversation()
    raws = [client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Conversation-Id": "mt"})
        for _ in range(2)]
    before = sum(int(r.headers["X-Context-Tokens-Before"]) for r in raws)
    after = sum(int(r.headers["X-Context-Tokens-After"]) for r in raws)
    masked = sum(int(r.headers["X-Context-Masked"]) for r in raws)
    assert [r.headers["X-Context-Compaction"] for r in raws] == ["auto", "reused"]
    labels = {"org": "acme", "model": MODEL}
    assert h.metric("context_proxy_received_tokens_total", **labels) == before
    assert h.metric("context_proxy_sent_tokens_total", **labels) == after
    assert h.metric("context_proxy_masked_tool_results_total", org="acme") == masked
    assert h.metric("context_proxy_masked_tokens_total", org="acme") > 0
    assert h.metric("context_proxy_compactions_total", outcome="auto") == 1
    assert h.metric("context_proxy_compactions_total", outcome="reused") == 1
    assert h.metric("context_proxy_summarization_duration_seconds_count") == 1
    assert h.metric("context_proxy_summarization_output_tokens_total") > 0
    assert h.metric("context_proxy_requests_total", route="chat", status_class="2xx") == 2
    assert h.metric("context_proxy_request_duration_seconds_count", route="chat") == 2
    assert h.metric("context_proxy_upstream_duration_seconds_count", route="chat") == 2
    assert h.metric("context_proxy_overhead_seconds_count", route="chat") == 2


def test_dividers_cli_matches_the_api(make_harness, sdk) -> None:
    import subprocess
    import sys

    h, _ = start(make_harness)
    client = sdk(h, h.create_key("acme"))
    client.chat.completions.create(model=MODEL, messages=big_conversation(), tools=TOOLS,
                                   extra_headers={"X-Conversation-Id": "cli"})
    api = client.get("/conversations/cli/dividers", cast_to=object)
    assert h.settings is not None
    env = {"CONTEXT_PROXY_DB": str(h.settings.db_path), "PATH": "",
           "CONTEXT_PROXY_DATABASE_URL": h.settings.database_url or ""}
    out = subprocess.run([sys.executable, "-m", "proxy.cli", "dividers", "--org", "acme", "cli"],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == api
    other = subprocess.run([sys.executable, "-m", "proxy.cli", "dividers", "--org", "globex",
                            "cli"], capture_output=True, text=True, env=env, timeout=60,
                           check=False)
    assert other.returncode == 1
