"""A deterministic generator of coding-agent conversations in OpenAI chat-completions format.

Shared by the demo, the tests and the benchmarks. An ``AgentSpec`` (frozen, hashable) holds every
parameter; the functions turn it into messages:

- ``opening_messages(spec)``: the system prompt, the task (the first user message) and, when
  ``spec.memory`` is set, a protected memory block as a second user message;
- ``agent_turn(spec, turn, rng)``: the assistant message of turn ``turn`` (1-based; content
  ``"Step N: ..."`` and one or two ``tool_calls``) and the ``tool`` messages answering its
  calls, one per call, in call order;
- ``turns(spec, count)``: ``agent_turn`` for turns 1, 2, … with one ``random.Random(spec.seed)``;
- ``conversation(spec, count)``: the opening followed by ``count`` turns, flattened.

Contracts: the output depends only on the spec (and, for ``agent_turn``, on the state of the
``rng`` passed in), never on time or I/O; equal specs give equal messages. Every list that ends
after a turn's results satisfies OpenAI's ordering rules (each call answered by exactly one
``tool`` message right after its assistant message). Call ids are ``call_<turn>_<tool>``, unique
within a conversation. Every tool called is declared in ``TOOLS`` (``write_file``: in
``CODING_TOOLS``). Returned messages are fresh
dicts: callers may mutate them.

Turn kinds, checked in this order: a ``write_todos`` plan rewrite when ``plan_every`` divides
``turn - plan_phase`` (answered ``"plan updated"``); a ``write_file`` call whose arguments carry
a whole file of ``write_tokens`` (drawn) when ``write_every`` divides ``turn`` (answered
``"wrote <path>"``; declared in ``CODING_TOOLS``, not ``TOOLS``); two parallel calls, ``grep`` and
``read_file``, when ``parallel_every`` divides ``turn`` (each output half the drawn size);
otherwise ``run_tests`` when ``tests_every`` divides ``turn``, else ``read_file``. A period of 0
disables its kind. With the default words, a tool output drawn at ``n`` >= 100 tokens has
between ``n`` and 1.35 × ``n`` tokens (o200k_base; typically 1.2 × ``n``: lines are budgeted at
12 tokens and run to about 14, kept so that the demo's sessions stay as they were). Each
``(turn, text)`` of ``facts`` puts ``text`` on the first line of that turn's first tool output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

SYSTEM = ("You are a careful coding agent working in the repository 'billing-service'. "
          "Deployment code word: AZURE-FALCON-42. Always run the tests before you finish.")
TASK = ("Migrate the invoice rounding in billing-service from float to Decimal, keep the public "
        "API unchanged, and make the test suite pass. The customer id used in the bug report "
        "is CUST-7781.")
MEMORY = "<memory>Prefer small commits. The CI job is BILLING-CI-9.</memory>"
WORDS = tuple("invoice amount decimal rounding total customer ledger line tax currency quantize "
              "assert fixture module return value cents precision float context error pass"
              .split())
PLAN_STEPS = ("read billing/rounding.py", "switch to Decimal", "fix tests", "run the suite")
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
    for name, desc in [("read_file", "Read a file"), ("run_tests", "Run the test suite"),
                       ("grep", "Search the code"), ("write_todos", "Replace the plan")]]
"""The schemas of every tool ``agent_turn`` calls; each takes one string argument, ``arg``."""
CODING_TOOLS: list[dict[str, Any]] = [*TOOLS, {"type": "function", "function": {
    "name": "write_file", "description": "Write a whole file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "content": {"type": "string"}}}}}]
"""``TOOLS`` and ``write_file``, for sessions with ``write_every`` set."""
RESPONSES_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
     "parameters": t["function"]["parameters"]} for t in TOOLS]
"""``TOOLS`` as the Responses API declares them."""
MESSAGES_TOOLS: list[dict[str, Any]] = [
    {"name": t["function"]["name"], "description": t["function"]["description"],
     "input_schema": t["function"]["parameters"]} for t in TOOLS]
"""``TOOLS`` as the Anthropic Messages API declares them."""

TOKENS_PER_LINE = 12  # a tool output line: a number and ten words


@dataclass(frozen=True)
class AgentSpec:
    """Every parameter of a generated session; the defaults are ``DEMO``'s (the demo's is
    ``DEMO_STAGES``)."""

    seed: int = 7
    output_tokens: tuple[int, int] = (500, 2500)  # drawn uniformly per turn, inclusive
    plan_every: int = 10  # write_todos when (turn - plan_phase) % plan_every == 0; 0: never
    plan_phase: int = 1
    parallel_every: int = 7  # grep + read_file when turn % parallel_every == 0; 0: never
    tests_every: int = 3  # run_tests when turn % tests_every == 0, else read_file; 0: never
    write_every: int = 0  # write_file when turn % write_every == 0; 0: never
    write_tokens: tuple[int, int] = (2000, 8000)  # a written file's size, drawn per write
    facts: tuple[tuple[int, str], ...] = ()  # (turn, text) buried in that turn's first output
    system: str = SYSTEM
    task: str = TASK
    memory: str | None = MEMORY  # None: no memory message
    words: tuple[str, ...] = WORDS  # the vocabulary of thoughts and tool outputs
    thought_words: tuple[int, int] = (60, 160)  # words in the assistant's "Step N: ..." text
    plan_steps: tuple[str, ...] = PLAN_STEPS
    grep_pattern: str = "quantize"
    follow_every: int = 0  # a user follow-up after the results when turn % follow_every == 0

    def __post_init__(self) -> None:
        low, high = self.output_tokens
        if not 0 <= low <= high or not 0 <= self.thought_words[0] <= self.thought_words[1]:
            raise ValueError("output_tokens and thought_words must be (low, high), "
                             "0 <= low <= high")
        if min(self.plan_every, self.parallel_every, self.tests_every, self.write_every,
               self.follow_every) < 0:
            raise ValueError("plan_every, parallel_every, tests_every, write_every and "
                             "follow_every must be >= 0")
        if not self.words:
            raise ValueError("words must not be empty")


DEMO_FACT = "ROUND-HALF-EVEN-7"
DEMO = AgentSpec(facts=((3, f"NOTE: the legacy rounding constant is {DEMO_FACT}."),))
"""The demo's session: the defaults plus the fact buried in turn 3's tool output."""
DEMO_STAGES = AgentSpec(thought_words=(40, 100), facts=DEMO.facts)
"""``context-proxy demo``'s session: ``DEMO`` with shorter thoughts (40-100 words), so that tool
outputs are most of a turn's growth (about 1.8k tokens a turn, a 36th of a 64k window): masking
steps then have enough to clear, and compaction still comes for what they leave."""


def opening_messages(spec: AgentSpec = DEMO) -> list[Message]:
    """System prompt, task (the first user message) and, if ``spec.memory``, the memory block."""
    messages: list[Message] = [{"role": "system", "content": spec.system},
                               {"role": "user", "content": spec.task}]
    if spec.memory is not None:
        messages.append({"role": "user", "content": spec.memory})
    return messages


def tool_output(rng: random.Random, tokens: int, turn: int,
                words: tuple[str, ...] = WORDS) -> str:
    """Numbered lines of ``words``, headed ``# output of step <turn>``, budgeted at 12 tokens a
    line: with the default words and ``tokens`` >= 100, 1 to 1.35 × ``tokens`` tokens."""
    lines = [f"# output of step {turn}"]
    while len(lines) * TOKENS_PER_LINE < tokens:
        lines.append(f"{rng.randint(1, 999):>4}: " + " ".join(rng.choices(words, k=10)))
    return "\n".join(lines)


def tool_call(turn: int, name: str, arg: str) -> dict[str, Any]:
    """One OpenAI function call, id ``call_<turn>_<name>``, arguments ``{"arg": arg}``."""
    return {"id": f"call_{turn}_{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps({"arg": arg})}}


def _every(period: int, value: int) -> bool:
    return period > 0 and value % period == 0


def _plan(spec: AgentSpec, turn: int) -> str:
    done = turn // spec.plan_every if spec.plan_every else 0
    return json.dumps([{"step": s, "done": i < done} for i, s in enumerate(spec.plan_steps)])


def agent_turn(spec: AgentSpec, turn: int, rng: random.Random
               ) -> tuple[Message, list[Message]]:
    """Turn ``turn``'s assistant message and the messages after it: the tool messages answering
    its calls, in order, then the user's follow-up on turns of ``spec.follow_every``.

    Draws from ``rng`` (output sizes and text, then the thought), so a session must play its
    turns in order on one ``rng`` to be reproducible; ``turns`` does that.
    """
    low, high = spec.output_tokens
    if _every(spec.plan_every, turn - spec.plan_phase):
        calls = [tool_call(turn, "write_todos", _plan(spec, turn))]
        outputs = ["plan updated"]
    elif _every(spec.write_every, turn):
        path = f"src/new_{turn}.py"
        text = tool_output(rng, rng.randint(*spec.write_tokens), turn, spec.words)
        calls = [{"id": f"call_{turn}_write_file", "type": "function", "function": {
            "name": "write_file", "arguments": json.dumps({"path": path, "content": text})}}]
        outputs = [f"wrote {path}"]
    elif _every(spec.parallel_every, turn):
        calls = [tool_call(turn, "grep", spec.grep_pattern),
                 tool_call(turn, "read_file", f"src/m{turn}.py")]
        outputs = [tool_output(rng, rng.randint(low, high) // 2, turn, spec.words)
                   for _ in calls]
    else:
        name = "run_tests" if _every(spec.tests_every, turn) else "read_file"
        calls = [tool_call(turn, name, f"src/module_{turn}.py")]
        outputs = [tool_output(rng, rng.randint(low, high), turn, spec.words)]
    for fact_turn, text in reversed(spec.facts):  # the first fact listed ends up on top
        if fact_turn == turn:
            outputs[0] = f"{text}\n{outputs[0]}"
    thought = f"Step {turn}: " + " ".join(rng.choices(spec.words,
                                                      k=rng.randint(*spec.thought_words)))
    assistant: Message = {"role": "assistant", "content": thought, "tool_calls": calls}
    results: list[Message] = [{"role": "tool", "tool_call_id": c["id"], "content": out}
                              for c, out in zip(calls, outputs, strict=True)]
    if _every(spec.follow_every, turn):  # the user steers mid-task (draws nothing from rng)
        results.append({"role": "user", "content": f"Also keep case {turn} in mind: the "
                                                   "totals must still round half to even."})
    return assistant, results


def turns(spec: AgentSpec = DEMO, count: int | None = None
          ) -> Iterator[tuple[Message, list[Message]]]:
    """``agent_turn`` for turns 1, 2, … (``count`` of them; endless when None), one seeded rng."""
    rng = random.Random(spec.seed)
    turn = 1
    while count is None or turn <= count:
        yield agent_turn(spec, turn, rng)
        turn += 1


def conversation(spec: AgentSpec = DEMO, count: int = 10) -> list[Message]:
    """The opening messages followed by the messages of turns 1..``count``."""
    messages = opening_messages(spec)
    for assistant, results in turns(spec, count):
        messages += [assistant, *results]
    return messages
