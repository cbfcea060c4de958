"""``POST /v1/responses`` through the real ``openai`` SDK: a long function-tool session is masked
and compacted in the Responses API's own items, reasoning items of kept turns arriving
unchanged; a ``previous_response_id`` request is relayed as it came."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from factories import SEED_STEPS_YAML, reachable, synchronous_policies

from proxy.context.adapters.openai_responses import read
from proxy.testing import agent
from proxy.testing.fake.fake_apis import RESPONSES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "gpt-agent"
WINDOW = 32_768
SPEC = agent.AgentSpec(thought_words=(300, 450), facts=agent.DEMO.facts)
TOOLS = agent.RESPONSES_TOOLS


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "ok"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


@pytest.fixture
def session(make_harness: Callable[..., Harness], tmp_path: Path) -> tuple[Harness, Script]:
    script = Script()
    return make_harness(fake=FakeUpstream(models={MODEL: WINDOW}, responder=script.respond,
                                          stream_chunks=3),
                        # the seed's steps: both stages in this API's shapes
                        env=synchronous_policies(tmp_path / "policies",
                                                 f"defaults:\n  {SEED_STEPS_YAML}\n")), script


def reasoning(turn: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{turn}", "summary": [],
            "encrypted_content": f"opaque-{turn}"}


def play_turn(client: openai.OpenAI, items: list[Any], turn: int) -> tuple[Any, Any]:
    """One request, streamed on every third turn; (the final response, the raw headers)."""
    kwargs: dict[str, Any] = dict(model=MODEL, instructions=agent.SYSTEM, tools=TOOLS,
                                  input=items, extra_headers={"X-Conversation-Id": "codex-1"})
    if turn % 3:
        raw = client.responses.with_raw_response.create(**kwargs)
        return raw.parse(), raw.headers
    with client.responses.with_streaming_response.create(stream=True, **kwargs) as raw:
        events = [json.loads(line[5:]) for line in raw.iter_lines() if line.startswith("data:")]
        return events[-1]["response"], raw.headers


def test_a_long_function_tool_session_is_masked_and_compacted(
        session: tuple[Harness, Script]) -> None:
    h, script = session
    items: list[Any] = [{"role": "user", "content": agent.TASK}]
    outcomes, masked = [], []
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0) as client:
        for turn, (assistant, results) in enumerate(agent.turns(SPEC, 60), start=1):
            script.next = assistant
            response, headers = play_turn(client, items, turn)
            outcomes.append(headers["x-context-compaction"])
            masked.append(int(headers["x-context-masked"]))
            assert int(headers["x-context-tokens-after"]) <= WINDOW
            sent = h.fake.requests[-1].json
            read(sent)  # function calls and outputs still pair up
            assert sent["instructions"] == agent.SYSTEM and sent["input"][0] == items[0]
            plans = [i for i in items if i.get("name") == "write_todos"]
            if plans:  # the newest plan pair stays verbatim
                assert plans[-1] in sent["input"] and next(
                    i for i in items if i.get("call_id") == plans[-1]["call_id"]
                    and i["type"] == "function_call_output") in sent["input"]
            mine = {json.dumps(i) for i in items}
            assert all(json.dumps(i) in mine for i in sent["input"]
                       if i.get("type") in ("reasoning", "function_call"))
            output = response["output"] if isinstance(response, dict) else [
                o.model_dump(exclude_none=True) for o in response.output]
            items += [reasoning(turn), *output,
                      *({"type": "function_call_output", "call_id": r["tool_call_id"],
                         "output": r["content"]} for r in results)]
        dividers = client.get("/conversations/codex-1/dividers", cast_to=object)
    assert "auto" in outcomes and max(masked) > 0
    assert len(dividers["data"]) == outcomes.count("auto")  # type: ignore[index]
    summaries = [b for b in h.fake.api_requests(RESPONSES, summaries=True) if "tools" in b]
    assert summaries and not h.fake.all_chat_requests()
    for body in summaries:
        assert body["instructions"] == agent.SYSTEM and body["tool_choice"] == "none"
        assert body["input"][0] == items[0]
    last = h.fake.api_requests(RESPONSES, summaries=False)[-1]
    assert reachable(h.base_url, client.api_key, "codex-1", json.dumps(last), agent.DEMO_FACT)
    assert h.fake.refusals() == []  # nothing the real API would refuse, summary calls included


def test_previous_response_id_is_relayed_as_it_came(make_harness: Callable[..., Harness]
                                                    ) -> None:
    h = make_harness()
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0) as client:
        raw = client.responses.with_raw_response.create(
            model="gpt-x", previous_response_id="resp_123", input="and then?")
    assert raw.headers["x-context-history"] == "upstream"
    assert h.fake.requests[-1].json["previous_response_id"] == "resp_123"
    assert h.fake.requests[-1].json["input"] == "and then?"
