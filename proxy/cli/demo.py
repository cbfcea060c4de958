"""``context-proxy demo``: a long scripted agent session through the proxy, entirely offline.

A built-in fake upstream and the proxy start on loopback ports the OS picks; the official
``openai`` SDK plays an agent that reads files, runs tests and keeps a ``write_todos`` plan, with
large tool outputs. Each turn prints what the client sent, what the upstream received and what
the proxy did, so a newcomer sees the context stages at work.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import openai

from proxy.context.tokens import TokenCounter
from proxy.policy.platform import PlatformConfig
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "demo-agent"
WINDOW = 16_384
SYSTEM = ("You are a careful coding agent working in the repository 'billing-service'. "
          "Deployment code word: AZURE-FALCON-42. Always run the tests before you finish.")
TASK = ("Migrate the invoice rounding in billing-service from float to Decimal, keep the public "
        "API unchanged, and make the test suite pass. The customer id used in the bug report "
        "is CUST-7781.")
TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
    for name, desc in [("read_file", "Read a file"), ("run_tests", "Run the test suite"),
                       ("grep", "Search the code"), ("write_todos", "Replace the plan")]]
MEMORY = "<memory>Prefer small commits. The CI job is BILLING-CI-9.</memory>"
BURIED_FACT = "ROUND-HALF-EVEN-7"
CONVERSATION = "demo-session"
WORDS = ("invoice amount decimal rounding total customer ledger line tax currency quantize "
         "assert fixture module return value cents precision float context error pass").split()


@dataclass
class Script:
    """What the fake upstream answers next; the demo sets it before each request."""

    next_message: dict[str, Any] = field(default_factory=dict)

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next_message


def _tool_output(rng: random.Random, tokens: int, turn: int) -> str:
    lines = [f"# output of step {turn}"]
    while len(lines) * 12 < tokens:
        lines.append(f"{rng.randint(1, 999):>4}: " + " ".join(rng.choices(WORDS, k=10)))
    return "\n".join(lines)


def _call(turn: int, name: str, arg: str) -> dict[str, Any]:
    return {"id": f"call_{turn}_{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps({"arg": arg})}}


def _plan(turn: int) -> str:
    steps = ["read billing/rounding.py", "switch to Decimal", "fix tests", "run the suite"]
    return json.dumps([{"step": s, "done": i < turn // 10} for i, s in enumerate(steps)])


def opening_messages() -> list[dict[str, Any]]:
    """System prompt, the task (first user message) and a protected memory block."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
            {"role": "user", "content": MEMORY}]


def agent_turn(turn: int, rng: random.Random, sizes: tuple[int, int] = (500, 2500)
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The assistant's tool call(s) for ``turn`` and the tool results that answer them.

    Every tenth turn (1, 11, …) rewrites the ``write_todos`` plan; every seventh makes two
    parallel calls; tool outputs are ``sizes`` tokens (roughly); turn 3 buries a fact.
    """
    low, high = sizes
    if turn % 10 == 1:
        calls = [_call(turn, "write_todos", _plan(turn))]
        outputs = ["plan updated"]
    elif turn % 7 == 0:  # parallel calls
        calls = [_call(turn, "grep", "quantize"), _call(turn, "read_file", f"src/m{turn}.py")]
        outputs = [_tool_output(rng, rng.randint(low, high) // 2, turn) for _ in calls]
    else:
        name = "run_tests" if turn % 3 == 0 else "read_file"
        calls = [_call(turn, name, f"src/module_{turn}.py")]
        outputs = [_tool_output(rng, rng.randint(low, high), turn)]
    if turn == 3:  # a fact buried in an early tool output
        outputs[0] = f"NOTE: the legacy rounding constant is {BURIED_FACT}.\n" + outputs[0]
    thought = f"Step {turn}: " + " ".join(rng.choices(WORDS, k=rng.randint(60, 160)))
    assistant = {"role": "assistant", "content": thought, "tool_calls": calls}
    results = [{"role": "tool", "tool_call_id": c["id"], "content": out}
               for c, out in zip(calls, outputs, strict=True)]
    return assistant, results


def _row(out: TextIO, *cols: object) -> None:
    widths = (5, 6, 9, 10, 7, 12, 10)
    out.write(" ".join(str(c).rjust(w) for c, w in zip(cols, widths, strict=True)) + "\n")


def run_demo(turns: int = 60, out: TextIO = sys.stdout) -> int:
    """Play ``turns`` agent turns through the proxy and print the per-turn table; exit code."""
    rng = random.Random(7)
    counter = TokenCounter()
    script = Script()
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=script.respond)
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake, platform=PlatformConfig()) as h:  # embedded defaults
        client = openai.OpenAI(base_url=h.base_url, api_key=h.create_key("demo-org"),
                               max_retries=0)
        messages = opening_messages()
        out.write(f"context-proxy demo: {turns} agent turns, model window {WINDOW:,} tokens, "
                  f"upstream {fake.base_url} (fake, offline)\n\n")
        _row(out, "turn", "msgs", "client", "upstream", "masked", "compaction", "divider")
        sent_total = received_total = 0
        started = time.monotonic()
        for turn in range(1, turns + 1):
            last = turn == turns
            assistant, results = agent_turn(turn, rng)
            script.next_message = ({"role": "assistant", "content": "All tests pass."} if last
                                   else assistant)
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                extra_headers={"X-Conversation-Id": CONVERSATION})
            raw.parse()
            client_tokens = counter.count_messages(messages, MODEL, TOOLS)
            upstream_tokens = counter.count_messages(fake.chat_requests()[-1]["messages"],
                                                     MODEL, TOOLS)
            sent_total += client_tokens
            received_total += upstream_tokens
            hd = raw.headers
            _row(out, turn, len(messages), f"{client_tokens:,}", f"{upstream_tokens:,}",
                 hd.get("x-context-masked", "-"), hd.get("x-context-compaction", "-"),
                 (hd.get("x-context-divider-id") or "-")[:10])
            if not last:
                messages += [assistant, *results]
        saved = 1 - received_total / sent_total if sent_total else 0.0
        final = json.dumps(fake.chat_requests()[-1]["messages"])
        dividers = client.get(f"/conversations/{CONVERSATION}/dividers", cast_to=object)
        out.write(f"\nTokens sent by the client, summed over the session:     {sent_total:>10,}\n"
                  f"Tokens the upstream received, summed over the session:  {received_total:>10,}"
                  f"  ({saved:.0%} saved)\n"
                  f"Summary calls made: {len(fake.summary_requests())} for "
                  f"{len(dividers['data'])} compactions (input larger than the summary "  # type: ignore[index]
                  "model's window is summarized in pieces, then merged)\n"
                  f"Fact buried in turn 3's tool output ({BURIED_FACT}) still reaches the "
                  f"upstream at the last turn: {'yes' if BURIED_FACT in final else 'no'}\n"
                  f"Elapsed: {time.monotonic() - started:.1f} s\n\n"
                  f"Dividers (GET /v1/conversations/{CONVERSATION}/dividers):\n")
        for d in dividers["data"]:  # type: ignore[index]
            out.write(f"  {d['id']}  {d['kind']:<6}  {d['text']}  "
                      f"(~{d['tokens_before']:,} → ~{d['tokens_after']:,} tokens, "
                      f"{d['covered_messages']} messages covered)\n")
    return 0
