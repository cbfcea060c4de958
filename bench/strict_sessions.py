"""Agent sessions shaped like today's coding agents, through context-proxy, against the strict
fake upstream: what the real API would have refused, and what the summary calls read from cache.

Plays deterministic agent sessions (``proxy.testing.agent``) long enough to be compacted, with
the official SDKs, the way the agents send them:

- ``claude``: Messages API, ``anthropic-beta`` with ``advanced-tool-use-2025-11-20`` and
  ``mid-conversation-tool-changes-2026-07-01``, a tool with ``defer_loading``, thinking on
  (the fake's signed thinking blocks sent back), a ``system`` message inside ``messages``
  after turn 5, a ``cache_control`` marker on the system prompt;
- ``claude-no-system``: the same without the ``system`` message; ``claude-fable``: that on a
  model with preserved thinking (a thinking block is refused once its prefix changes);
- ``codex``: Responses API on a ``gpt-5*`` name, ``store: false``, reasoning items with
  ``encrypted_content`` kept in the input, ``prompt_cache_key``, a custom ``apply_patch`` tool.

For each it prints the client's errors, every distinct refusal of the fake
(``FakeUpstream.refusals()``) and, per summary call, its prompt and cached tokens. A session
the proxy handles as the real API wants prints no refusal.

    .venv/bin/python bench/strict_sessions.py              # all four, a few minutes
    .venv/bin/python bench/strict_sessions.py codex
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anthropic
import openai

from proxy.testing import agent
from proxy.testing.fake.fake_apis import as_chat
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

SPEC = agent.AgentSpec(thought_words=(300, 450), facts=agent.DEMO.facts)
TURNS = 40
WINDOW = 32_768
FABLE = "claude-fable-5-1"  # a model with preserved thinking: its blocks bound to their prefix
BETA = ("claude-code-20250219,advanced-tool-use-2025-11-20,"
        "mid-conversation-tool-changes-2026-07-01")


class Script:
    """The fake's responder: the next assistant message of the session."""

    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "ok"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def claude(h: Harness, script: Script, mid_system: bool = True,
           model: str = "claude-agent") -> list[str]:
    """A Claude Code-like session (``mid_system``: with its system message after turn 5); the
    client's errors."""
    tools: list[dict[str, Any]] = [
        {"name": t["function"]["name"], "description": t["function"]["description"],
         "input_schema": t["function"]["parameters"]} for t in agent.TOOLS]
    tools.append(dict(tools[0], name="web_fetch", defer_loading=True))
    system = [{"type": "text", "text": agent.SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": agent.TASK}]
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                             api_key=h.create_key("acme"), max_retries=0) as client:
        for turn, (assistant, results) in enumerate(agent.turns(SPEC, TURNS), start=1):
            script.next = assistant
            try:
                answer = client.messages.create(
                    model=model, max_tokens=4096, system=system,  # type: ignore[arg-type]
                    tools=tools, messages=messages,  # type: ignore[arg-type]
                    thinking={"type": "enabled", "budget_tokens": 2048},
                    extra_headers={"X-Conversation-Id": "claude-1", "anthropic-beta": BETA})
            except anthropic.APIStatusError as e:
                return [f"turn {turn}: {e}"]
            messages += [
                {"role": "assistant",
                 "content": [b.model_dump(exclude_none=True) for b in answer.content]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": r["tool_call_id"],
                     "content": r["content"]} for r in results]}]
            if turn == 5 and mid_system:
                messages.append({"role": "system", "content": "web_fetch is now available."})
    return []


def codex(h: Harness, script: Script) -> list[str]:
    """A Codex CLI-like session; the client's errors."""
    tools: list[dict[str, Any]] = [
        {"type": "function", "name": t["function"]["name"],
         "description": t["function"]["description"], "parameters": t["function"]["parameters"]}
        for t in agent.TOOLS]
    tools.append({"type": "custom", "name": "apply_patch", "description": "Patch files"})
    items: list[Any] = [{"role": "user", "content": agent.TASK}]
    with openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"),
                       max_retries=0) as client:
        for turn, (assistant, results) in enumerate(agent.turns(SPEC, TURNS), start=1):
            script.next = assistant
            try:
                response = client.responses.create(
                    model="gpt-5.5", instructions=agent.SYSTEM, tools=tools,  # type: ignore[arg-type]
                    input=items, store=False, include=["reasoning.encrypted_content"],
                    reasoning={"effort": "medium"}, prompt_cache_key="codex-thread-1",
                    extra_headers={"X-Conversation-Id": "codex-1"})
            except openai.APIStatusError as e:
                return [f"turn {turn}: {e}"]
            items += [o.model_dump(exclude_none=True) for o in response.output]
            items += [{"type": "function_call_output", "call_id": r["tool_call_id"],
                       "output": r["content"]} for r in results]
    return []


def report(name: str, fake: FakeUpstream, errors: list[str]) -> None:
    print(f"== {name}: {len(fake.requests)} requests, {len(fake.refusals())} refused")
    for error in errors:
        print("client error:", error[:300])
    for path, message in dict.fromkeys(fake.refusals()):
        print(f"refused on {path}: {message[:300]}")
    for r in fake.requests:
        body = r.json if r.body else None
        if r.usage and isinstance(body, dict) and is_summary_request(as_chat(r.path, body)):
            cached = (r.usage.get("cache_read_input_tokens")
                      or r.usage.get("input_tokens_details", {}).get("cached_tokens") or 0)
            prompt = r.usage["input_tokens"] + (r.usage.get("cache_read_input_tokens") or 0) \
                + (r.usage.get("cache_creation_input_tokens") or 0)
            print(f"summary call ({'on the prefix' if 'tools' in body else 'a transcript'}): "
                  f"{prompt} prompt tokens, {cached} cached")


def main(argv: list[str]) -> None:
    sessions: dict[str, Callable[[Harness, Script], list[str]]] = {
        "claude": claude, "claude-no-system": partial(claude, mid_system=False),
        "claude-fable": partial(claude, mid_system=False, model=FABLE), "codex": codex}
    for name in argv or list(sessions):
        play = sessions[name]
        script = Script()
        fake = FakeUpstream(models={"claude-agent": WINDOW, FABLE: WINDOW, "gpt-5.5": WINDOW},
                            responder=script.respond)
        with tempfile.TemporaryDirectory() as tmp, Harness(Path(tmp), fake=fake) as h:
            report(name, fake, play(h, script))


if __name__ == "__main__":
    main(sys.argv[1:])
