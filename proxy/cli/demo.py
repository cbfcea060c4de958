"""``context-proxy demo``: a long scripted agent session through the proxy, entirely offline.

A built-in fake upstream and the proxy start on loopback ports the OS picks; the official
``openai`` SDK plays the agent session ``proxy.testing.agent.DEMO_STAGES`` (it reads files, runs
tests and keeps a ``write_todos`` plan, with large tool outputs). A table row shows what the
client sent, what the upstream received and what the proxy did, so a newcomer sees both context
stages at work at the default policy: 80 turns at a 64k window, where a turn adds about a 36th
of the window, so a masking step frees enough, with compaction's trigger far enough away, to pay
for itself (``masking.priced``), and compaction clears what the steps leave.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import openai

from proxy.context.stages.mask import PLACEHOLDER_PREFIX, is_placeholder
from proxy.context.stages.shared import is_summary, summary_body
from proxy.context.tokens.counter import TokenCounter
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.cost import Call, cached_share, cost, passthrough
from proxy.testing.fake_upstream import (
    FakeUpstream,
    approx_tokens,
    default_responder,
    default_summarizer,
)
from proxy.testing.harness import Harness
from proxy.testing.spills import fact_spill

MODEL = "demo-agent"
WINDOW = 65_536
TURNS = 120  # masking steps at 21, 37 and 53, a compaction at 76, steps at 92 and 108
SESSION = agent.DEMO_STAGES  # seed 7, a fact buried in turn 3, tool outputs most of a turn
EVERY = 5  # past EVERY turns, the table shows every EVERY-th turn and every turn with news
CONVERSATION = "demo-session"
# The demo model is priced like a current frontier model (US dollars per million tokens), so the
# report can say what the session cost and saved; real models take litellm's prices.
PRICES = {"input_per_mtok": 3.0, "cached_per_mtok": 0.3, "write_per_mtok": 3.75,
          "output_per_mtok": 15.0}


LEGEND = ("Legend: client/upstream = prompt tokens the client sent / the upstream received; "
          "masked = tool outputs shown as a placeholder in the list sent upstream; "
          "compaction = what the summary stage did (auto: a new summary, reused: the stored "
          "one); divider = the compaction's record.")


def shows(turn: int, turns: int, masked: int, before: int, compaction: str) -> bool:
    """Whether the table prints ``turn``'s row: every row of a short session; past ``EVERY``
    turns the first, the last, every ``EVERY``-th and every turn where something happened (a
    masking step, a new summary or one that could not be made)."""
    return (turns <= 2 * EVERY or turn in (1, turns) or turn % EVERY == 0
            or masked != before or compaction in ("auto", "insufficient"))


@dataclass
class Script:
    """What the fake upstream answers next; the demo sets it before each request (``None``: the
    fake's own short answer, for a newcomer's client once the session is over)."""

    next_message: dict[str, Any] | None = field(default_factory=dict)

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next_message if self.next_message is not None else default_responder(body)


def _row(out: TextIO, *cols: object) -> None:
    widths = (5, 6, 9, 10, 7, 12, 10)
    out.write(" ".join(str(c).rjust(w) for c, w in zip(cols, widths, strict=True)) + "\n")


def upstream_calls(fake: FakeUpstream) -> list[Call]:
    """Every chat call the fake answered, main and summary, with the usage it reported."""
    out = []
    for rec in fake.requests:
        if rec.path == "/v1/chat/completions" and rec.usage is not None:
            details = rec.usage.get("prompt_tokens_details") or {}
            out.append(Call(int(rec.usage["prompt_tokens"]),
                            int(details.get("cached_tokens", 0))))
    return out


def _clip(text: str, limit: int = 420) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def show_examples(out: TextIO, requests: list[dict[str, Any]],
                  compacting: tuple[int, Any] | None) -> None:
    """The first masked placeholder and the last summary the upstream received (``requests``:
    the main chat requests, in order), and the headers of the first turn that compacted."""
    sent = [m for body in requests for m in body["messages"]]
    placeholder = next((m["content"] for m in sent if m.get("role") == "tool"
                        and str(m.get("content", "")).startswith(PLACEHOLDER_PREFIX)), None)
    summary = next((summary_body(m) for m in reversed(sent) if is_summary(m)), None)
    out.write("\nA masked tool output, as the upstream received it:\n  "
              f"{placeholder or '(none)'}\n")
    out.write(f"\nThe summary the upstream received in place of the older turns:\n  "
              f"{_clip(summary) if summary else '(none)'}\n")
    if compacting is not None:
        turn, headers = compacting
        out.write(f"\nHeaders of the answer to turn {turn}, the first that compacted:\n")
        for name in sorted(k for k in headers if k.lower().startswith(("x-context-",
                                                                         "x-conversation"))):
            out.write(f"  {name}: {headers[name]}\n")


HANDOFF_LINES = 40  # a summary the length a model writes for this prompt: ~2k tokens


def handoff(body: dict[str, Any]) -> str:
    """The demo upstream's summary: the facts it read (``default_summarizer``) in a structured
    handoff as long as a model's (about 2k tokens, billed as output), so compaction costs in the
    demo what it costs with a real model, not a one-line summary's nothing."""
    step = ("- Step {n}: read the module, ran the tests, kept the plan current; the totals "
            "code in billing/ledger.py still rounds half to even and the fixtures stay green.")
    return default_summarizer(body) + "\n\nDone so far:\n" + "\n".join(
        step.format(n=n) for n in range(1, HANDOFF_LINES + 1))


def run_demo(turns: int = TURNS, out: TextIO = sys.stdout, serve: bool = False,
             port: int = 0) -> int:
    """Play ``turns`` agent turns through the proxy and print the per-turn table; exit code.
    With ``serve``, keep the proxy and its fake upstream running afterwards (until Ctrl-C)."""
    script = Script()
    fake = FakeUpstream(models={MODEL: WINDOW}, responder=script.respond,
                        summarizer=handoff, count_output=True)
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake, platform=PlatformConfig(
                defaults=validate_layer({"models": {MODEL: PRICES}})), port=port,
                    env={"CONTEXT_PROXY_DATABASE_URL": ""}) as h:  # offline: a temporary file
        key = h.create_key("demo-org")  # the platform: the embedded defaults
        with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
            played = _play(out, turns, client, fake, script)
            _report(out, client, fake, played)
            _money(out, h)
        if serve:
            script.next_message = None
            fake.record = False
            from proxy.cli.demo_serve import keep_serving

            keep_serving(out, h.base_url, key)
    return 0


def _money(out: TextIO, h: Harness) -> None:
    """The session's money as the proxy booked it (its ``/metrics``), summary calls included."""
    spent = h.metric("context_proxy_cost_spent_usd_total")
    without = h.metric("context_proxy_cost_without_proxy_usd_total")
    share = f" ({1 - spent / without:.0%} of it)" if without else ""
    saved = without - spent
    out.write(f"\nMoney, at ${PRICES['input_per_mtok']:g} per million input tokens "
              f"(${PRICES['cached_per_mtok']:g} cached, ${PRICES['write_per_mtok']:g} cache "
              f"writes, ${PRICES['output_per_mtok']:g} output): spent upstream "
              f"${spent:.4f}; the client's own requests would have cost ${without:.4f} "
              f"without the proxy; saved {'-' if saved < 0 else ''}${abs(saved):.4f}{share}\n")
    lost = h.metric("context_proxy_reasoning_lost_total")
    out.write(f"Reasoning lost: {lost:.0f} thinking blocks or reasoning items (only models that "
              "bind reasoning to its history lose any: the newest Claude and GPT models; "
              "docs/apis.md)\n")


@dataclass
class Played:
    """What the session sent and received, summed, for the report under the table."""

    sent: int = 0
    received: int = 0
    prompts: list[int] = field(default_factory=list)  # the client's own prompts, as the fake counts
    compacting: tuple[int, Any] | None = None  # the first compacting turn and its headers
    started: float = field(default_factory=time.monotonic)
    masked: int = 0  # tool outputs shown as placeholders in the last request the upstream got


def _play(out: TextIO, turns: int, client: openai.OpenAI, fake: FakeUpstream,
          script: Script) -> Played:
    counter, p = TokenCounter(), Played()
    messages = agent.opening_messages(SESSION)
    out.write(f"context-proxy demo: {turns} agent turns, model window {WINDOW:,} tokens, "
              f"upstream {fake.base_url} (fake, offline)\n\n")
    _row(out, "turn", "msgs", "client", "upstream", "masked", "compaction", "divider")
    first = 0
    for turn, (assistant, results) in enumerate(agent.turns(SESSION, turns), start=1):
        last = turn == turns
        script.next_message = ({"role": "assistant", "content": "All tests pass."} if last
                               else assistant)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Conversation-Id": CONVERSATION})
        raw.parse()
        client_tokens = counter.count_messages(messages, MODEL, agent.TOOLS)
        p.prompts.append(approx_tokens(messages, agent.TOOLS))
        sent = fake.chat_requests()[-1]["messages"]
        upstream_tokens = counter.count_messages(sent, MODEL, agent.TOOLS)
        p.sent += client_tokens
        p.received += upstream_tokens
        hd = raw.headers
        compaction = hd.get("x-context-compaction", "-")
        if p.compacting is None and compaction == "auto":
            p.compacting = (turn, dict(hd))
        masked, before = masked_in(sent), p.masked
        p.masked = masked
        if shows(turn, turns, masked, before, compaction):
            _row(out, turn, len(messages), f"{client_tokens:,}", f"{upstream_tokens:,}",
                 masked, compaction, (hd.get("x-context-divider-id") or "-")[:10])
        first = first or client_tokens
        if not last:
            messages += [assistant, *results]
    out.write(f"\n{LEGEND}\n")
    if turns > 2 * EVERY:
        out.write(f"Rows: turn 1, every {EVERY}th turn, the last, and every turn where the "
                  "masked count changed or a summary was made.\n")
    growth = (client_tokens - first) / max(1, turns - 1)
    if growth:
        out.write(f"Why both stages show: a turn adds ~{growth:,.0f} tokens, 1/"
                  f"{WINDOW / growth:.0f} of the {WINDOW // 1024}k window. Early on, a masking "
                  "step at 0.55 of it frees most of the list with compaction's trigger (0.80) "
                  "many turns away, so it pays for itself (the freed tokens' cache reads on "
                  "every turn until then outweigh rewriting the prefix after it); the agent's "
                  "own text, which masking never clears, keeps growing, steps free less and "
                  "less, and compaction takes over. At 16k a turn is ~1/9 of the window: no "
                  "step would pay, and compaction does all the work.\n")
    return p


def masked_in(sent: list[Any]) -> int:
    """Tool outputs shown as a placeholder in the list the upstream received: on a ``reused``
    turn too, whose ``X-Context-Masked`` counts only what this request newly masked."""
    return sum(1 for m in sent if isinstance(m, dict) and m.get("role") == "tool"
               and is_placeholder(m.get("content")))


def _fact_found(base_url: str, key: str, final: str) -> str:
    """Where the demo's planted fact is in the last request: in it, or in the original of a
    spill it names (``proxy.testing.spills.fact_spill``)."""
    where = fact_spill(base_url, key, CONVERSATION, final, agent.DEMO_FACT)
    if where is None:
        return "lost"
    return f"readable from spill {where}, which that request names" if where else \
        "in the request the upstream received"


def _report(out: TextIO, client: openai.OpenAI, fake: FakeUpstream, p: Played) -> None:
    saved = 1 - p.received / p.sent if p.sent else 0.0
    calls = upstream_calls(fake)
    ratio = cost(calls, 0.1) / max(1.0, cost(passthrough(p.prompts), 0.1))
    final = json.dumps(fake.chat_requests()[-1]["messages"])
    dividers = client.get(f"/conversations/{CONVERSATION}/dividers", cast_to=object)
    out.write(f"\nTokens sent by the client, summed over the session:     {p.sent:>10,}\n"
              f"Tokens the upstream received, summed over the session:  {p.received:>10,}"
              f"  ({saved:.0%} saved)\n"
              f"Summary calls made: {len(fake.summary_requests())} for "
              f"{len(dividers['data'])} compactions (input larger than the summary "  # type: ignore[index]
              "model's window is summarized in pieces, then merged)\n"
              f"Served from the upstream's prompt cache: {cached_share(calls):.0%} of the "
              f"upstream prompt tokens; at a cached price of 0.1 of input the session "
              f"costs {ratio:.2f}x what the client's own pass-through would\n"
              f"Fact buried in turn 3's tool output ({agent.DEMO_FACT}) at the last turn: "
              f"{_fact_found(str(client.base_url).rstrip('/'), client.api_key, final)}\n"
              f"Elapsed: {time.monotonic() - p.started:.1f} s\n\n"
              f"Dividers (GET /v1/conversations/{CONVERSATION}/dividers):\n")
    for d in dividers["data"]:  # type: ignore[index]
        out.write(f"  {d['id']}  {d['kind']:<6}  {d['text']}  "
                  f"(~{d['tokens_before']:,} → ~{d['tokens_after']:,} tokens, "
                  f"{d['covered_messages']} messages covered)\n")
    show_examples(out, fake.chat_requests(), p.compacting)
