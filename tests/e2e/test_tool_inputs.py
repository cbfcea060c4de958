"""Large tool-call arguments (``masking.clear_tool_inputs``) through the real SDKs, in all three
APIs: a coding agent's old ``write_file`` calls reach the upstream with a placeholder that is a
valid JSON object in the API's own shape, the newest calls verbatim, and the original
arguments readable as spills."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from proxy.context.adapters.anthropic import read as read_messages
from proxy.context.adapters.openai_responses import read as read_responses
from proxy.context.stages.ordering import ordering_problems
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake.fake_apis import MESSAGES, RESPONSES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "coder"
WINDOW = 32_768
SPEC = agent.AgentSpec(seed=5, output_tokens=(200, 600), thought_words=(10, 20), write_every=2,
                       write_tokens=(1500, 2500), plan_every=0)
TURNS = 16
PLACEHOLDER = re.compile(r"^\[tool input cleared: [\d,]+ tokens from write_file; "
                         r"spill ([0-9a-f]{16})\]$")
CONVERSATION = "coding-1"


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


@pytest.fixture
def session(make_harness: Callable[..., Harness]) -> tuple[Harness, Script]:
    script = Script()
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=script.respond)
    layer = validate_layer({"compaction.enabled": False, "masking.min_free_ratio": 0.0})
    return make_harness(fake=fake, platform=PlatformConfig(defaults=layer)), script


def originals() -> dict[str, str]:
    """Call id → the arguments text of every write_file call of the session."""
    return {c["id"]: c["function"]["arguments"] for a, _ in agent.turns(SPEC, TURNS)
            for c in a["tool_calls"] if c["function"]["name"] == "write_file"}


def check_cleared(h: Harness, key: str, cleared: dict[str, Any]) -> None:
    """Each cleared input is {"cleared": placeholder}; its spill holds the original."""
    assert cleared, "no call arguments were cleared"
    want = originals()
    for cid, value in cleared.items():
        assert isinstance(value, dict) and list(value) == ["cleared"]
        match = PLACEHOLDER.match(value["cleared"])
        assert match, value
        with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
            spill = client.get(f"/conversations/{CONVERSATION}/spills/{match.group(1)}",
                               cast_to=object)
        assert spill["content"] == want[cid]  # type: ignore[index]


def test_chat_completions_clear_old_write_arguments(session: tuple[Harness, Script]) -> None:
    h, script = session
    key = h.create_key("acme")
    messages = agent.opening_messages(SPEC)
    cleared: dict[str, Any] = {}
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            script.next = assistant
            client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                           tools=agent.CODING_TOOLS,  # type: ignore[arg-type]
                                           extra_headers={"X-Conversation-Id": CONVERSATION})
            sent = h.fake.chat_requests()[-1]["messages"]
            assert ordering_problems(sent) == []  # still a list the chat API accepts
            calls = [c for m in sent for c in m.get("tool_calls") or []]
            newest = [m["tool_call_id"] for m in messages if m["role"] == "tool"][-5:]
            mine = {c["id"]: c for m in messages for c in m.get("tool_calls") or []}
            for c in calls:
                if c["id"] in newest:
                    assert c == mine[c["id"]]  # the newest keep_recent calls go verbatim
                elif c != mine[c["id"]]:
                    cleared[c["id"]] = json.loads(c["function"]["arguments"])
            messages = [*messages, assistant, *results]
    check_cleared(h, key, cleared)


def test_messages_api_clears_old_write_inputs(session: tuple[Harness, Script]) -> None:
    h, script = session
    key = h.create_key("acme")
    messages: list[Any] = [{"role": "user", "content": agent.TASK}]
    cleared: dict[str, Any] = {}
    tools = [*agent.MESSAGES_TOOLS, {"name": "write_file", "description": "Write a whole file",
                                    "input_schema": agent.CODING_TOOLS[-1]["function"][
                                        "parameters"]}]
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"), api_key=key,
                             max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            script.next = assistant
            answer = client.messages.create(model=MODEL, max_tokens=1024, system=agent.SYSTEM,
                                            tools=tools, messages=messages,
                                            extra_headers={"X-Conversation-Id": CONVERSATION})
            sent = h.fake.api_requests(MESSAGES, summaries=False)[-1]
            read_messages(sent)  # tool_use and tool_result still pair up
            uses = [b for m in sent["messages"] if isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_use"]
            cleared.update({b["id"]: b["input"] for b in uses if "cleared" in b["input"]})
            blocks = [b.model_dump(exclude_none=True) for b in answer.content]
            messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": r["tool_call_id"], "content": r["content"]}
                for r in results]}]
    assert h.fake.refusals() == []  # nothing the real API would refuse
    check_cleared(h, key, cleared)


def test_responses_api_clears_old_write_arguments(session: tuple[Harness, Script]) -> None:
    h, script = session
    key = h.create_key("acme")
    items: list[Any] = [{"role": "user", "content": agent.TASK}]
    cleared: dict[str, Any] = {}
    tools = [*agent.RESPONSES_TOOLS, {"type": "function", "name": "write_file",
                                      "description": "Write a whole file",
                                      "parameters": agent.CODING_TOOLS[-1]["function"][
                                          "parameters"]}]
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
        for assistant, results in agent.turns(SPEC, TURNS):
            script.next = assistant
            response = client.responses.create(model=MODEL, instructions=agent.SYSTEM,
                                               tools=tools, input=items,
                                               extra_headers={"X-Conversation-Id": CONVERSATION})
            sent = h.fake.api_requests(RESPONSES, summaries=False)[-1]
            read_responses(sent)  # calls and outputs still pair up
            for i in sent["input"]:
                if i.get("type") == "function_call" and '"cleared"' in i["arguments"][:12]:
                    cleared[i["call_id"]] = json.loads(i["arguments"])
            items += [*(o.model_dump(exclude_none=True) for o in response.output),
                      *({"type": "function_call_output", "call_id": r["tool_call_id"],
                         "output": r["content"]} for r in results)]
    assert h.fake.refusals() == []
    check_cleared(h, key, cleared)
