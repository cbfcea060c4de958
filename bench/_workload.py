"""The request bodies ``overhead.py`` sends.

- ``small_body(stream)``: the fixed 50-message request (system, user, assistant turns with tool
  calls, tool results, four tool schemas; about 4,200 tokens). It is kept as a fixed workload,
  byte for byte the request of earlier runs, so figures stay comparable; it is far below every
  masking and compaction trigger.
- ``Growing``: a large agent conversation from ``proxy.testing.agent`` (about 2 MB of JSON and
  1,600 messages at the middle request), sent as a client would: request ``i`` carries the
  first ``base + i`` turns, so each request is the previous one plus one new turn and every
  earlier message is one the proxy has already counted (its per-message token cache is warm
  for them). A turn is the assistant's tool call and its tool result, two messages: a request
  that added only the assistant message would leave its call unanswered, which the proxy
  rightly refuses (400 ``invalid_message_sequence``). It uses ``LONG_MODEL``, whose window
  (``LONG_WINDOW``, served by the fake's ``/v1/models``) is so large that nothing is masked or
  compacted.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.testing import agent

MODEL = "gpt-4o-mini"
WINDOW = 128_000
LONG_MODEL = "gpt-4o-mini-long"
LONG_WINDOW = 4_000_000
MODELS = {MODEL: WINDOW, LONG_MODEL: LONG_WINDOW}

# --- the fixed 50-message request -------------------------------------------------------------

SYSTEM = """You are Forge, a senior software engineering agent working inside the repository \
'payments-gateway' (Python 3.11, FastAPI, SQLAlchemy 2, PostgreSQL 15, Redis for idempotency \
keys). You act through tools: read_file(path, start, end) returns numbered lines; grep(pattern, \
path) returns matching lines; run_tests(selector) runs pytest and returns its summary; \
apply_patch(diff) applies a unified diff. Rules: read before you edit; keep public function \
signatures stable unless the task says otherwise; every change ships with a test; never touch \
migrations that already ran in production (anything under migrations/versions older than \
2024_06); prefer small, reviewable patches; when a test fails, read the failure before changing \
code again. When you finish, summarise what changed, why, and what you verified. Money is always \
an integer number of minor units (cents) or a Decimal quantized to the currency's exponent; \
floats are a bug. Times are UTC, timezone-aware. Log lines are structured (key=value) and never \
contain card numbers, CVCs or full IBANs."""

TASK = """Refunds for partially captured payments are sometimes rejected with \
'RefundExceedsCapture' even though the refund is smaller than what was captured. Support ticket \
PAY-4127: merchant m_88213 captured 149.99 EUR of a 200.00 EUR authorization, then a refund of \
49.99 EUR failed. Find the cause, fix it without changing the public API of \
payments/refunds.py, add a regression test, and make the whole suite pass."""

FILES = ["payments/refunds.py", "payments/captures.py", "payments/money.py",
         "payments/ledger.py", "tests/test_refunds.py", "payments/idempotency.py"]
FUNCS = ["refundable_amount", "capture_total", "to_minor_units", "post_entry",
         "validate_refund", "reserve_key"]
NEXT = ["widen the status filter", "add a regression test", "check the idempotency path",
        "run the full suite", "review the log lines"]
ASIDES = ["Also check captures in GBP with exponent 2.", "Keep the log keys unchanged.",
          "Make sure pending refunds still count.", "Do not touch migrations.",
          "Good, continue."]


def _code(i: int) -> str:
    f, fn = FILES[i % len(FILES)], FUNCS[i % len(FUNCS)]
    base = 40 + 7 * i
    lines = [
        f"{base}  def {fn}(payment: Payment, amount: Money | None = None) -> Money:",
        f'{base + 1}      """Return the {fn.replace("_", " ")} for ``payment`` in minor units."""',
        f"{base + 2}      captured = sum((c.amount for c in payment.captures if c.status == "
        f'"succeeded"), Money.zero(payment.currency))',
        f"{base + 3}      refunded = sum((r.amount for r in payment.refunds if r.status in "
        f'("pending", "succeeded")), Money.zero(payment.currency))',
        f"{base + 4}      if amount is not None and amount.currency != payment.currency:",
        f'{base + 5}          raise CurrencyMismatch(f"{{amount.currency}} != '
        '{payment.currency}")',
        f"{base + 6}      remaining = captured - refunded",
        f"{base + 7}      return remaining if amount is None else min(remaining, amount)",
    ]
    return f"# {f} (lines {base}-{base + 7})\n" + "\n".join(lines)


def _grep(i: int) -> str:
    fn = FUNCS[i % len(FUNCS)]
    hits = [f"{FILES[(i + k) % len(FILES)]}:{100 + 13 * k + i}:    total = {fn}(payment"
            f"{', amount' if k % 2 else ''})  # call site {k}" for k in range(4)]
    return f"4 matches for '{fn}'\n" + "\n".join(hits)


def _tests(i: int) -> str:
    failed = max(0, 3 - i // 3)
    return (f"============================= test session starts ==============================\n"
            f"platform linux -- Python 3.11.7, pytest-8.3.2\ncollected {212 + i} items\n\n"
            f"tests/test_refunds.py ....{'F' * failed}.......                      [ 9%]\n"
            f"tests/test_ledger.py ...............................................[ 70%]\n"
            + (f"FAILED tests/test_refunds.py::test_partial_capture_refund[{i}] - "
               f"RefundExceedsCapture: refund 4999 > refundable {4999 - 100 * i}\n"
               if failed else "")
            + f"=========== {failed} failed, {212 + i - failed} passed in {3.1 + i / 10:.2f}s "
            f"===========")


def _call(i: int, k: int) -> dict[str, Any]:
    kind = (i + k) % 3
    if kind == 0:
        name, args = "read_file", {"path": FILES[(i + k) % len(FILES)], "start": 40 + 7 * i,
                                   "end": 48 + 7 * i}
    elif kind == 1:
        name, args = "grep", {"pattern": FUNCS[(i + k) % len(FUNCS)], "path": "payments/"}
    else:
        name, args = "run_tests", {"selector": f"tests/test_refunds.py -k partial_{i}"}
    return {"id": f"call_{i:02d}_{k}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def _result(i: int, call: dict[str, Any]) -> dict[str, Any]:
    name = call["function"]["name"]
    out = {"read_file": _code, "grep": _grep, "run_tests": _tests}[name](i)
    return {"role": "tool", "tool_call_id": call["id"], "content": out}


def _calls(i: int, n: int, thought: str | None) -> list[dict[str, Any]]:
    calls = [_call(i, k) for k in range(n)]
    return [{"role": "assistant", "content": thought, "tool_calls": calls},
            *(_result(i, c) for c in calls)]


def build_messages() -> list[dict[str, Any]]:
    """50 messages, about 4,200 tokens: an agent session mixing text, tool calls and results."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": TASK}]
    step = 0
    for cycle in range(5):
        msgs += _calls(step, 1, f"Step {step}: checking how {FUNCS[step % 6]} handles partial "
                                "captures before changing anything.")
        step += 1
        msgs += _calls(step, 2, f"Step {step}: comparing the call sites with the ledger entries "
                                "for the same payment.")
        step += 1
        msgs += _calls(step, 1, None if cycle % 2 else f"Step {step}: re-running the refund "
                                                          "tests.")
        step += 1
        msgs.append({"role": "assistant", "content":
                     f"Finding {cycle + 1}: refundable_amount counts captures with status "
                     f"'succeeded' but the partial capture of PAY-4127 is stored as "
                     f"'partially_succeeded', so captured is 0 and every refund exceeds it. "
                     f"The ledger agrees: entry L-{5521 + cycle} has 14999 cents captured. "
                     f"I will {NEXT[cycle]} next; it does not change the public API."})
        msgs.append({"role": "user", "content": f"OK. {ASIDES[cycle]}"})
    msgs += _calls(step, 1, "Final check of the whole suite.")
    msgs.append({"role": "user", "content": "Great. Summarise the change, the cause and what "
                 "you verified, in five bullet points at most."})
    assert len(msgs) == 50, len(msgs)
    return msgs


TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc, "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)[:1]}}}
    for name, desc, params in [
        ("read_file", "Read numbered lines of a file.",
         {"path": "string", "start": "integer", "end": "integer"}),
        ("grep", "Search the repository.", {"pattern": "string", "path": "string"}),
        ("run_tests", "Run pytest with a selector.", {"selector": "string"}),
        ("apply_patch", "Apply a unified diff.", {"diff": "string"})]]


def small_body(stream: bool) -> bytes:
    """The 50-message request, non-streamed or streamed (with usage in the last chunk)."""
    body: dict[str, Any] = {"model": MODEL, "messages": build_messages(), "tools": TOOLS,
                            "temperature": 0.2}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def count_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 model: str = MODEL) -> int | None:
    """Prompt tokens as context-proxy counts them; None when its token module fails to load."""
    try:
        from proxy.context.tokens.counter import TokenCounter

        return int(TokenCounter().count_messages(messages, model, tools))
    except Exception:
        return None


# --- the large, growing conversation ----------------------------------------------------------

LARGE_SPEC = agent.AgentSpec(seed=2024, memory=None, parallel_every=0, output_tokens=(80, 420))
LARGE_MESSAGES = 1_600  # messages of the middle request (about 2.0 MB with LARGE_SPEC)


class Growing:
    """Request bodies of one agent conversation growing by one turn per request.

    ``body(i)`` for ``i`` in ``[-warmup, requests)`` holds the opening and the first
    ``base_turns + i`` turns; the middle request, ``body(requests // 2)``, has
    ``middle_messages`` messages. Each message is JSON-encoded once; a body is the join of the
    encoded messages (cheap, and done before the request is timed).
    """

    def __init__(self, requests: int, warmup: int, spec: agent.AgentSpec = LARGE_SPEC,
                 middle_messages: int = LARGE_MESSAGES, model: str = LONG_MODEL) -> None:
        self.spec, self.model, self.warmup, self.requests = spec, model, warmup, requests
        self.messages = agent.opening_messages(spec)
        self.ends: list[int] = [len(self.messages)]  # message count after 0, 1, 2, … turns
        source = agent.turns(spec)

        def grow() -> None:
            assistant, results = next(source)
            self.messages += [assistant, *results]
            self.ends.append(len(self.messages))

        while self.ends[-1] < middle_messages:
            grow()
        self.base_turns = len(self.ends) - 1 - requests // 2
        if self.base_turns < warmup:
            raise ValueError("the conversation is too short for its requests and warm-up")
        while len(self.ends) - 1 < self.base_turns + requests:
            grow()
        self._encoded = [json.dumps(m).encode() for m in self.messages]
        self._head = json.dumps({"model": model}).encode()[:-1] + b', "messages": ['
        self._tail = (b'], "tools": ' + json.dumps(agent.TOOLS).encode()
                      + b', "temperature": 0.2}')

    def count(self, i: int) -> int:
        """Messages in ``body(i)``."""
        return self.ends[self.base_turns + i]

    def body(self, i: int) -> bytes:
        if not -self.warmup <= i < self.requests:
            raise IndexError(i)
        return self._head + b", ".join(self._encoded[:self.count(i)]) + self._tail

    def tokens(self, i: int) -> int | None:
        return count_tokens(self.messages[:self.count(i)], agent.TOOLS, self.model)


# --- the per-request scenarios: every request differs from the one before -------------------

GROW_TURNS = 40  # turns of one growing conversation before the next one starts


def _turn(conv: int, t: int) -> list[dict[str, Any]]:
    """Turn ``t`` of conversation ``conv``: the assistant's answer to the last user message and
    the user's next message (two messages: the list still ends with the user)."""
    return [{"role": "assistant", "content": f"Turn {t}: {NEXT[t % len(NEXT)]} is done for "
             f"conversation {conv}; the refund path now keeps partial captures in the total."},
            {"role": "user", "content": f"OK ({conv}.{t}). {ASIDES[t % len(ASIDES)]}"}]


def _opening(conv: int) -> list[dict[str, Any]]:
    """The fixed 50 messages, with a first user message of its own per conversation (so the
    proxy names each conversation apart: its id is a digest of the opening)."""
    msgs = build_messages()
    msgs[1] = {"role": "user", "content": f"{TASK} (conversation {conv})"}
    return msgs


def _body(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": MODEL, "messages": messages, "tools": TOOLS,
                       "temperature": 0.2}).encode()


def last_changes_body(i: int) -> bytes:
    """Request ``i`` of one conversation of 50 messages whose last (user) message is new on
    every request: the first 49 repeat the previous request byte for byte."""
    msgs = build_messages()
    msgs[-1] = {"role": "user", "content": f"{msgs[-1]['content']} (request {i})"}
    return _body(msgs)


def growing_body(i: int) -> bytes:
    """Request ``i`` of conversations that grow by one turn per request: conversation
    ``i // GROW_TURNS`` at turn ``i % GROW_TURNS`` (the fixed 50 messages plus that many
    turns), so each request is the previous one plus one turn."""
    conv, t = divmod(i, GROW_TURNS)
    msgs = _opening(1_000_000 + conv)
    for k in range(t + 1):
        msgs += _turn(conv, k)
    return _body(msgs)


def many_body(i: int, conversations: int = 16) -> bytes:
    """Request ``i`` of ``conversations`` distinct conversations at once: conversation
    ``i % conversations``, one turn longer than its previous request."""
    t, conv = divmod(i, conversations)
    msgs = _opening(2_000_000 + conv + conversations * (t // GROW_TURNS))
    for k in range(t % GROW_TURNS + 1):
        msgs += _turn(conv, k)
    return _body(msgs)


# name -> (title, body of request i): the scenarios measured at concurrency 1 and 16
SCENARIOS = {
    "last-changes": ("50 messages, the last one new on every request", last_changes_body),
    "growing": ("one conversation growing by one turn per request", growing_body),
    "16-convs": ("16 conversations at once, each one turn longer per request", many_body),
}
