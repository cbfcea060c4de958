"""The agent-session generator (``proxy.testing.agent``): deterministic, valid, sized as told."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random

import pytest

from proxy.context.stages.ordering import ordering_problems
from proxy.context.tokens.counter import TokenCounter
from proxy.testing import agent
from proxy.testing.agent import AgentSpec

MODEL = "gpt-4o-mini"
SPECS = [
    agent.DEMO,
    AgentSpec(seed=3, parallel_every=2, plan_every=0, memory=None, output_tokens=(50, 80)),
    AgentSpec(seed=11, plan_every=4, plan_phase=0, parallel_every=0, tests_every=0),
    AgentSpec(seed=5, follow_every=3),
]


@pytest.mark.parametrize("spec", SPECS)
def test_a_seed_gives_the_same_session_every_time(spec: AgentSpec) -> None:
    first = agent.conversation(spec, 25)
    assert first == agent.conversation(spec, 25)
    assert json.loads(json.dumps(first)) == first  # plain JSON: what a client would send
    assert list(agent.turns(spec, 5)) == [agent.agent_turn(spec, t, rng)
                                          for rng in [random.Random(spec.seed)]
                                          for t in range(1, 6)]
    other = agent.conversation(dataclasses.replace(spec, seed=spec.seed + 1), 25)
    assert other != first
    assert [m["role"] for m in other] == [m["role"] for m in first]  # the shape is the spec's


def test_returned_messages_are_fresh() -> None:
    messages = agent.conversation(agent.DEMO, 3)
    messages[0]["content"] = "changed"
    messages[3]["tool_calls"][0]["id"] = "changed"
    assert agent.conversation(agent.DEMO, 3)[0]["content"] == agent.SYSTEM
    assert agent.conversation(agent.DEMO, 3)[3]["tool_calls"][0]["id"] == "call_1_write_todos"


@pytest.mark.parametrize("spec", SPECS)
def test_every_turn_ends_a_valid_transcript(spec: AgentSpec) -> None:
    messages = agent.opening_messages(spec)
    assert ordering_problems(messages) == []
    declared = {t["function"]["name"] for t in agent.TOOLS}
    ids: set[str] = set()
    for assistant, results in agent.turns(spec, 40):
        calls = assistant["tool_calls"]
        answers = [r for r in results if r["role"] == "tool"]  # then a follow-up, if any
        assert [r["tool_call_id"] for r in answers] == [c["id"] for c in calls]
        assert results[:len(answers)] == answers
        assert {c["function"]["name"] for c in calls} <= declared
        assert ids.isdisjoint(c["id"] for c in calls)
        ids.update(c["id"] for c in calls)
        messages += [assistant, *results]
        assert ordering_problems(messages) == []
    # cut inside a turn: the last call is left unanswered, which the validator refuses
    cut = len(messages) - (2 if messages[-1]["role"] == "user" else 1)
    assert ordering_problems(messages[:cut]) != []


def test_turn_kinds_follow_the_periods() -> None:
    names = {t: [c["function"]["name"] for c in a["tool_calls"]]
             for t, (a, _) in enumerate(agent.turns(agent.DEMO, 30), start=1)}
    assert names[1] == names[11] == names[21] == ["write_todos"]
    assert names[7] == names[14] == names[28] == ["grep", "read_file"]
    assert names[3] == names[6] == names[9] == ["run_tests"]
    assert names[2] == names[4] == ["read_file"]
    assert names[21] == ["write_todos"]  # 21 is a multiple of 7 and 3: the plan comes first
    assert agent.opening_messages(agent.DEMO)[2]["content"] == agent.MEMORY
    assert len(agent.opening_messages(dataclasses.replace(agent.DEMO, memory=None))) == 2
    plain = AgentSpec(plan_every=0, parallel_every=0, tests_every=0)
    assert {c["function"]["name"] for a, _ in agent.turns(plain, 30) for c in a["tool_calls"]} \
        == {"read_file"}
    for turn, (assistant, _) in enumerate(agent.turns(agent.DEMO, 5), start=1):
        assert assistant["content"].startswith(f"Step {turn}: ")
        assert 60 <= len(assistant["content"].split()) - 2 <= 160


def test_tool_outputs_are_about_the_size_asked_for() -> None:
    counter = TokenCounter()
    low, high = 400, 900
    spec = AgentSpec(seed=5, output_tokens=(low, high))
    sizes: list[int] = []
    for assistant, results in agent.turns(spec, 60):
        if assistant["tool_calls"][0]["function"]["name"] == "write_todos":
            continue
        share = len(results)  # parallel calls split the drawn size between them
        for result in results:
            tokens = counter.content_tokens(result, MODEL) * share
            assert low <= tokens <= 1.35 * high + 20, tokens
            sizes.append(tokens)
    assert max(sizes) - min(sizes) > (high - low) / 2  # drawn over the range, not fixed
    messages = agent.conversation(spec, 60)
    total = counter.count_messages(messages, MODEL, agent.TOOLS)
    assert 0.8 * sum(sizes) < total < 1.6 * sum(sizes)


def test_buried_facts_are_where_they_were_put() -> None:
    spec = AgentSpec(facts=((3, "FACT-ONE-1"), (7, "FACT-TWO-2"), (3, "FACT-THREE-3"),
                            (11, "FACT-FOUR-4")))
    session = list(agent.turns(spec, 12))
    first_output = {t: results[0]["content"] for t, (_, results) in enumerate(session, start=1)}
    assert first_output[3].splitlines()[:2] == ["FACT-ONE-1", "FACT-THREE-3"]
    assert first_output[7].startswith("FACT-TWO-2\n")  # a parallel turn: the grep output
    assert first_output[11] == "FACT-FOUR-4\nplan updated"  # a plan turn
    text = json.dumps(agent.conversation(spec, 12))
    assert all(f in text for f in ("FACT-ONE-1", "FACT-TWO-2", "FACT-THREE-3", "FACT-FOUR-4"))
    assert "FACT-" not in json.dumps(agent.conversation(AgentSpec(), 12))
    assert agent.DEMO_FACT in json.dumps(agent.conversation(agent.DEMO, 3))


# The demo's session as the demo's own generator made it before it switched to this one (its
# 60 turns, checked equal then): sha256 of the session's JSON with sorted keys.
DEMO_SESSION_SHA256 = "3ebddad253bb9f0f26d70dc8f1f07e9e1269ae18ebd25560381acebff60fd7ab"


def test_the_demo_session_is_unchanged() -> None:
    """``context-proxy demo`` plays ``agent.DEMO``: its table stays what it was."""
    text = json.dumps(agent.conversation(agent.DEMO, 60), sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == DEMO_SESSION_SHA256


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        AgentSpec(output_tokens=(10, 5))
    with pytest.raises(ValueError):
        AgentSpec(parallel_every=-1)
    with pytest.raises(ValueError):
        AgentSpec(words=())
    with pytest.raises(ValueError):
        AgentSpec(follow_every=-2)
    assert hash(agent.DEMO) == hash(dataclasses.replace(agent.DEMO))  # frozen and hashable


def test_coding_sessions_write_whole_files_in_their_arguments() -> None:
    counter = TokenCounter()
    spec = AgentSpec(seed=4, write_every=4, write_tokens=(2000, 3000))
    declared = {t["function"]["name"] for t in agent.CODING_TOOLS}
    messages = agent.opening_messages(spec)
    for turn, (assistant, results) in enumerate(agent.turns(spec, 12), start=1):
        call = assistant["tool_calls"][0]
        assert {c["function"]["name"] for c in assistant["tool_calls"]} <= declared
        if turn in (4, 8, 12):
            args = json.loads(call["function"]["arguments"])
            assert call["function"]["name"] == "write_file"
            assert args["path"] == f"src/new_{turn}.py"
            assert 2000 <= counter.text_tokens(args["content"], MODEL) <= 1.35 * 3000 + 20
            assert results[0]["content"] == f"wrote src/new_{turn}.py"
        else:
            assert call["function"]["name"] != "write_file"
        messages += [assistant, *results]
    assert ordering_problems(messages) == []
    assert "write_file" not in {t["function"]["name"] for t in agent.TOOLS}
    # no writes asked: the rng draws as before, so other sessions are unchanged
    assert agent.conversation(AgentSpec(seed=4), 12) == agent.conversation(
        dataclasses.replace(spec, write_every=0), 12)


def test_a_user_follows_up_after_the_results_of_every_nth_turn() -> None:
    """The user steers mid-task: on turns of ``follow_every`` a user message follows the
    results; the rest of the session (sizes, thoughts, calls) is what it is without them."""
    spec = AgentSpec(seed=9, follow_every=4)
    plain = list(agent.turns(dataclasses.replace(spec, follow_every=0), 12))
    for turn, ((assistant, results), (same, bare)) in enumerate(
            zip(agent.turns(spec, 12), plain, strict=True), start=1):
        assert assistant == same
        if turn % 4 == 0:
            assert results[:-1] == bare and results[-1]["role"] == "user"
        else:
            assert results == bare
