"""Passthrough tenancy: each unbound client key is its own namespace for conversations."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from factories import seed_steps_platform

from proxy.context.stages.mask import spill_id
from proxy.context.stages.shared import is_summary
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream

MODEL = "gpt-4o-w32k"
SPEC = agent.AgentSpec(seed=9, output_tokens=(5000, 6000), thought_words=(5, 10))


def test_unbound_passthrough_keys_never_see_each_others_conversations(make_harness: Any,
                                                                      sdk: Any) -> None:
    fake = FakeUpstream(models={MODEL: 32_000})
    h = make_harness(fake=fake, env={"CONTEXT_PROXY_AUTH_MODE": "passthrough"},
                     platform=seed_steps_platform())
    alice, bob = sdk(h, "sk-alice-own-key-0001"), sdk(h, "sk-bob-own-key-0002")
    messages = agent.conversation(SPEC, 10)
    headers = {"X-Conversation-Id": "shared-name"}
    first = alice.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS, extra_headers=headers)
    assert first.headers["X-Context-Compaction"] == "auto"
    assert int(first.headers["X-Context-Masked"]) > 0
    summaries = len(fake.summary_requests())
    # Bob sends the very same conversation under the same id: his own namespace, so he gets
    # a summary of his own (no reuse of Alice's) and cannot read hers.
    second = bob.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS, extra_headers=headers)
    assert second.headers["X-Context-Compaction"] == "auto"
    assert len(fake.summary_requests()) > summaries
    assert fake.requests[-1].headers["Authorization"] == "Bearer sk-bob-own-key-0002"
    masked = next(m for m in messages if m.get("role") == "tool" and len(m["content"]) > 1000)
    sid = spill_id(masked["content"])
    for client, divider in ((alice, first.headers["X-Context-Divider-Id"]),
                            (bob, second.headers["X-Context-Divider-Id"])):
        got = client.get("/conversations/shared-name/dividers", cast_to=object)
        assert [d["id"] for d in got["data"]] == [divider]
        assert client.get(f"/conversations/shared-name/spills/{sid}",
                          cast_to=object)["content"] == masked["content"]
    stranger = sdk(h, "sk-carol-own-key-0003")
    for path in ("/conversations/shared-name/dividers",
                 f"/conversations/shared-name/spills/{sid}"):
        with pytest.raises(openai.NotFoundError):
            stranger.get(path, cast_to=object)
    # Each divider lists the tool outputs its summary covered, each kept as a spill (those
    # masking had not cleared too) that the conversation's own key reads and no other does.
    for client, answer in ((alice, first), (bob, second)):
        divider = client.get("/conversations/shared-name/dividers", cast_to=object)["data"][0]
        first_turn, end = divider["covered_turns"]
        outputs = divider["tool_outputs"]
        covered = {spill_id(m["content"]): m for m in messages[first_turn:end]
                   if m.get("role") == "tool"}
        assert sorted(o["spill_id"] for o in outputs) == sorted(covered)
        assert len(outputs) > int(answer.headers["X-Context-Masked"]) > 0
        for o in outputs:
            assert o["tool"] and o["tokens"] > 0
            path = f"/conversations/shared-name/spills/{o['spill_id']}"
            assert client.get(path, cast_to=object)["content"] == covered[o["spill_id"]][
                "content"]
            with pytest.raises(openai.NotFoundError):
                stranger.get(path, cast_to=object)
    # A third turn of Alice's reuses her own summary, not Bob's.
    grown = [*messages, {"role": "user", "content": "next"}]
    third = alice.chat.completions.with_raw_response.create(
        model=MODEL, messages=grown, tools=agent.TOOLS, extra_headers=headers)
    assert third.headers["X-Context-Compaction"] == "reused"
    sent = fake.chat_requests()[-1]["messages"]
    assert any(is_summary(m) for m in sent)


def test_a_bound_passthrough_key_shares_its_organizations_conversations(make_harness: Any,
                                                                        sdk: Any) -> None:
    h = make_harness(fake=FakeUpstream(models={MODEL: 32_000}),
                     env={"CONTEXT_PROXY_AUTH_MODE": "passthrough"})
    h.state.store.keys.bind("sk-team-key-a", "acme")
    h.state.store.keys.bind("sk-team-key-b", "acme")
    a, b = sdk(h, "sk-team-key-a"), sdk(h, "sk-team-key-b")
    messages = agent.conversation(SPEC, 10)
    headers = {"X-Conversation-Id": "team"}
    made = a.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS, extra_headers=headers)
    assert made.headers["X-Context-Compaction"] == "auto"
    again = b.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=agent.TOOLS, extra_headers=headers)
    assert again.headers["X-Context-Compaction"] == "reused"
