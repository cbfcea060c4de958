"""One agent session played through the proxy in managed or shadow mode (``mode``), with the real
``openai`` SDK, against the in-process fake upstream: what the proxy saved (managed) or says it
would have saved (shadow), in prompt tokens and US dollars. Shared by the shadow-mode tests and
``bench/session_cost.py --shadow``.

Managed mode's savings are what it did: the tokens it kept from the upstream (the
``X-Context-Tokens-Before`` less ``-After`` of every answer) and the money its clients' own
requests would have cost less what was spent, summary calls included (``/metrics``). Shadow
mode's are what its answers said (``X-Context-Shadow-Saved-Tokens`` and ``-Saved-Usd``). The
session also keeps the bytes the client sent and those the upstream received, turn by turn.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

PRICES = {"input_per_mtok": 2.5, "cached_per_mtok": 0.25, "output_per_mtok": 10.0}
"""Dollars per million tokens of the session's model (cache reads at a tenth of input)."""


@dataclass
class Played:
    """A played session: per turn, the client's body and what the upstream received for it
    (its main call), the summary calls made, and the savings."""

    mode: str
    sent: list[bytes] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    summary_calls: int = 0
    saved_tokens: int = 0
    saved_usd: float = 0.0
    headers: list[dict[str, str]] = field(default_factory=list)


def budget_summarizer(tokens: int) -> Any:
    """A fake summarizer whose summaries fill their budget (``tokens``), as a model asked for a
    thorough handoff does: what shadow mode's estimate assumes."""
    def summarize(body: dict[str, Any]) -> str:
        return "Summary of the work so far:" + " word" * (tokens - 8)
    return summarize


def play(mode: str, turns: int, window: int, spec: agent.AgentSpec,
         summary_tokens: int | None = None, db: Path | None = None) -> Played:
    """Play ``turns`` of ``spec`` at ``window`` in ``mode``; ``summary_tokens``: the fake writes
    summaries of that many tokens (its short default otherwise). The fake reports each answer's
    output tokens (``count_output``), so a summary's output is paid for."""
    model = f"gpt-4o-w{window // 1000}k"
    fake = FakeUpstream(models={model: window}, count_output=True)
    if summary_tokens is not None:
        fake.summarizer = budget_summarizer(summary_tokens)
    layer = validate_layer({"mode": mode, "models": {model: {"context_window": window,
                                                             **PRICES}}})
    out = Played(mode)

    def keep(request: Any) -> None:  # the SDK's own httpx request
        if request.url.path.endswith("/chat/completions"):
            out.sent.append(request.read())

    with tempfile.TemporaryDirectory() as tmp, \
            Harness(db or Path(tmp), fake=fake, platform=PlatformConfig(defaults=layer)) as h, \
            openai.DefaultHttpxClient(event_hooks={"request": [keep]}) as http, \
            openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0,
                          http_client=http) as client:
        messages = agent.opening_messages(spec)
        for assistant, results in agent.turns(spec, turns):
            fake.responder = _answering(assistant)
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
                extra_headers={"X-Conversation-Id": f"shadow-{turns}x{window}"})
            out.headers.append(dict(raw.headers))
            messages = [*messages, assistant, *results]
        h.settle()
        main = [r for r in fake.requests if r.path == "/v1/chat/completions"]
        out.received = [r.body for r in main if not is_summary_request(r.json)]
        out.summary_calls = len(main) - len(out.received)
        _savings(out, h)
    return out


def _answering(message: dict[str, Any]) -> Any:
    """A fake responder answering every main call with ``message``."""
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        return message
    return respond


def _savings(out: Played, h: Harness) -> None:
    if out.mode == "shadow":
        out.saved_tokens = sum(int(x["x-context-shadow-saved-tokens"]) for x in out.headers)
        out.saved_usd = sum(float(x["x-context-shadow-saved-usd"]) for x in out.headers)
        return
    out.saved_tokens = sum(int(x["x-context-tokens-before"]) - int(x["x-context-tokens-after"])
                           for x in out.headers)
    out.saved_usd = h.metric("context_proxy_cost_without_proxy_usd_total") - \
        h.metric("context_proxy_cost_spent_usd_total")
