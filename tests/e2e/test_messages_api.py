"""``POST /v1/messages`` through the real ``anthropic`` SDK: a long agent session is masked and
compacted like a chat one, in the Messages API's own shapes, with thinking blocks and
``cache_control`` markers of kept messages arriving unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from factories import SEED_STEPS_YAML, reachable, synchronous_policies

from proxy.context.adapters.anthropic import read
from proxy.testing import agent
from proxy.testing.fake.fake_apis import MESSAGES, thinking_block
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "claude-agent"
WINDOW = 32_768
CONVERSATION = "claude-session"
TOOLS = agent.MESSAGES_TOOLS
# Long thoughts: with masking alone the list still outgrows the trigger, so both stages run.
SPEC = agent.AgentSpec(thought_words=(300, 450), facts=agent.DEMO.facts)
SYSTEM = [{"type": "text", "text": agent.SYSTEM, "cache_control": {"type": "ephemeral"}}]


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "ok"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def thinking(turn: int) -> dict[str, Any]:
    return thinking_block(f"Turn {turn}: what next?")  # signed as the fake signs its own


def results_message(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": r["tool_call_id"], "content": r["content"]}
        for r in results]}


@pytest.fixture
def session(make_harness: Callable[..., Harness], tmp_path: Path) -> tuple[Harness, Script]:
    script = Script()
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=script.respond)
    # The seed's steps: the session shows masking and compaction in this API's shapes, not
    # when a step pays for itself.
    env = synchronous_policies(tmp_path / "policies", f"defaults:\n  {SEED_STEPS_YAML}\n")
    return make_harness(fake=fake, env=env), script


def client_for(h: Harness) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                               api_key=h.create_key("acme"), max_retries=0)


def play_turn(client: anthropic.Anthropic, messages: list[Any], turn: int) -> tuple[Any, Any]:
    """One request, through ``messages.stream`` on every third turn; (message, headers)."""
    kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=1024, system=SYSTEM, tools=TOOLS,
                                  messages=messages,
                                  extra_headers={"X-Conversation-Id": CONVERSATION})
    if turn % 3:
        raw = client.messages.with_raw_response.create(**kwargs)
        return raw.parse(), raw.headers
    with client.messages.stream(**kwargs) as stream:
        return stream.get_final_message(), stream.response.headers


def test_a_long_agent_session_is_masked_and_compacted(session: tuple[Harness, Script]) -> None:
    h, script = session
    messages: list[Any] = [{"role": "user", "content": agent.TASK}]
    outcomes, masked = [], []
    with client_for(h) as client:
        for turn, (assistant, results) in enumerate(agent.turns(SPEC, 60), start=1):
            script.next = assistant
            answer, headers = play_turn(client, messages, turn)
            outcomes.append(headers["x-context-compaction"])
            masked.append(int(headers["x-context-masked"]))
            assert int(headers["x-context-tokens-after"]) <= WINDOW
            sent = h.fake.requests[-1].json
            read(sent)  # the tool pairs the upstream got are valid for this API
            assert sent["system"] == SYSTEM and sent["messages"][0] == messages[0]
            _kept_blocks_unchanged(sent, messages)
            blocks = [b.model_dump(exclude_none=True) for b in answer.content]
            messages += [{"role": "assistant", "content": [thinking(turn), *blocks]},
                         results_message(results)]
        dividers = client.get(f"/v1/conversations/{CONVERSATION}/dividers", cast_to=object)
    assert "auto" in outcomes and max(masked) > 0
    assert len(dividers["data"]) == outcomes.count("auto")  # type: ignore[index]
    main = h.fake.api_requests(MESSAGES, summaries=False)
    summaries = h.fake.api_requests(MESSAGES, summaries=True)
    assert summaries and not h.fake.all_chat_requests()  # every call in the request's own API
    riding = [b for b in summaries if "tools" in b]  # the calls on the cached prefix
    assert riding
    for summary in riding:  # the conversation's own system, tools and first messages
        assert summary["system"] == SYSTEM and summary["tools"] == TOOLS
        assert "tool_choice" not in summary  # as the conversation sent it: Anthropic's cache
        # of the messages is keyed by it
        assert summary["messages"][0] == messages[0] and summary["messages"][-1]["role"] == "user"
    # The buried fact survives: in the summary, or in a spill the summary's list names.
    assert reachable(h.base_url, client.api_key, CONVERSATION, json.dumps(main[-1]),
                     agent.DEMO_FACT)
    assert h.fake.refusals() == []  # nothing the real API would refuse, summary calls included


def _kept_blocks_unchanged(sent: dict[str, Any], messages: list[Any]) -> None:
    """Every assistant message the upstream got is one the client sent, byte for byte
    (thinking blocks and all); the newest plan (write_todos) pair is among them."""
    mine = {json.dumps(m) for m in messages if m["role"] == "assistant"}
    for m in sent["messages"]:
        if m["role"] == "assistant":
            assert json.dumps(m) in mine
    plans = [m for m in messages if m["role"] == "assistant" and any(
        b.get("name") == "write_todos" for b in m["content"] if isinstance(b, dict))]
    if plans:
        assert json.dumps(plans[-1]) in {json.dumps(m) for m in sent["messages"]}
