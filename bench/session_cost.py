"""What long agent sessions cost through context-proxy, against the client's own pass-through.

Plays deterministic agent sessions (``proxy.testing.agent``, tool outputs of about 1–4k
tokens) through the proxy with the official ``openai`` SDK, in front of the in-process fake
upstream, whose prompt cache bills like OpenAI's (``PromptCache``: per key and model, the
longest shared prefix of whole messages, nothing under 1,024 tokens, steps of 128). For every
session it prints the upstream prompt tokens (main and summary calls), the cached tokens and
their share, the prefix rewrites (``context_proxy_prefix_rewrites_total``), the summary calls
and their cached share, and the cache-adjusted cost at cached prices of 0.1, 0.25 and 0.5 of
the input price, as a ratio to the client's own pass-through cost (``proxy.testing.cost``):
over the whole session, and over the turns where pass-through still fits the window; and the
session's cost where the provider bills cache writes at 1.25x input (cached at 0.1).

    .venv/bin/python bench/session_cost.py            # all six sessions, a few minutes
    .venv/bin/python bench/session_cost.py --only 150x128k
    .venv/bin/python bench/session_cost.py --matrix     # every shape x policy (session_matrix)
    .venv/bin/python bench/session_cost.py --shadow     # shadow's estimate vs managed's savings
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy.policy.model import validate_layer  # noqa: E402
from proxy.policy.platform import PlatformConfig  # noqa: E402
from proxy.testing import agent, shadow_run  # noqa: E402
from proxy.testing.cost import Call, cached_share, cost, passthrough, priced  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream, approx_tokens, is_summary_request  # noqa: E402
from proxy.testing.harness import Harness  # noqa: E402

PRICES = (0.1, 0.25, 0.5)
WRITE = 1.25  # a cache write's price, where the provider bills them (OpenAI's newest, Anthropic)
SPEC = agent.AgentSpec(seed=11, output_tokens=(1200, 4200), thought_words=(10, 40))
"""A coding agent: a line of text and a tool call per turn, tool outputs of about 1-4k tokens
(median 2.4k; parallel calls split one draw), so that pass-through outgrows a 128k window after
about 40 turns."""


@dataclass(frozen=True)
class Session:
    turns: int
    window: int
    in_steps: bool

    @property
    def name(self) -> str:
        return f"{self.turns}x{self.window // 1000}k"

    @property
    def model(self) -> str:
        return f"gpt-4o-w{self.window // 1000}k"  # an o200k model name: both sides count alike


SESSIONS = [Session(t, w, s) for t, w in ((150, 128_000), (40, 32_000), (300, 200_000))
            for s in (True, False)]


@dataclass
class Played:
    session: Session
    calls: list[Call] = field(default_factory=list)
    fits: list[Call] = field(default_factory=list)  # calls made in turns where pass-through fits
    client: list[int] = field(default_factory=list)  # the client's prompt tokens per turn
    rewrites: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def _calls(fake: FakeUpstream, start: int) -> list[Call]:
    out = []
    for rec in fake.requests[start:]:
        if rec.path == "/v1/chat/completions" and rec.usage is not None:
            details = rec.usage.get("prompt_tokens_details") or {}
            out.append(Call(int(rec.usage["prompt_tokens"]), int(details.get("cached_tokens", 0)),
                            summary=is_summary_request(rec.json),
                            written_tokens=int(details.get("cache_write_tokens", 0))))
    return out


def play(session: Session, spec: agent.AgentSpec = SPEC,
         policy: dict[str, Any] | None = None) -> Played:
    """Play ``session``; ``policy``: more platform defaults (policy fields and values)."""
    script = Script()
    fake = FakeUpstream(models={session.model: session.window}, responder=script.respond)
    layer = validate_layer({**(policy or {}), "masking.in_steps": session.in_steps})
    played = Played(session)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake, platform=PlatformConfig(defaults=layer)) as h, \
            openai.OpenAI(base_url=h.base_url, api_key=h.create_key("bench"),
                          max_retries=0) as client:
        messages = agent.opening_messages(spec)
        for assistant, results in agent.turns(spec, session.turns):
            script.next = assistant
            start = len(fake.requests)
            client.chat.completions.create(
                model=session.model, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
                extra_headers={"X-Conversation-Id": f"bench-{session.name}"})
            prompt = approx_tokens(messages, agent.TOOLS)
            played.client.append(prompt)
            calls = _calls(fake, start)
            played.calls += calls
            if prompt <= session.window:
                played.fits += calls
            messages = [*messages, assistant, *results]
        registry = h.state.metrics.registry
        for stage in ("mask", "compact"):
            played.rewrites[stage] = registry.get_sample_value(
                "context_proxy_prefix_rewrites_total", {"stage": stage}) or 0.0
    played.seconds = time.monotonic() - started
    return played


def _ratios(calls: Sequence[Call], base: Sequence[Call]) -> str:
    return " ".join(f"{cost(calls, p) / cost(base, p):5.2f}" for p in PRICES)


def _written(calls: Sequence[Call], base: Sequence[Call]) -> str:
    """The session's cost over pass-through with reads at 0.1 and the cache writes the
    upstream reports at ``WRITE`` x input (``proxy.testing.cost.priced``)."""
    return f"{priced(calls, PRICES[0], WRITE) / priced(base, PRICES[0], WRITE):5.2f}"


def report(results: Sequence[Played]) -> None:
    print(f"{'session':<9} {'steps':<5} {'upstream':>10} {'cached':>10} {'share':>6} "
          f"{'rewr':>5} {'summ':>5} {'s.share':>7} {'cost/pass (0.1 0.25 0.5)':>24} "
          f"{'fits: cost/pass':>19} {'w1.25':>5} {'up/client':>9} {'secs':>5}")
    for r in results:
        base = passthrough(r.client)
        fits_base = [c for c, p in zip(base, r.client, strict=True) if p <= r.session.window]
        summaries = [c for c in r.calls if c.summary]
        upstream = sum(c.prompt_tokens for c in r.calls)
        print(f"{r.session.name:<9} {str(r.session.in_steps).lower():<5} {upstream:>10,} "
              f"{sum(c.cached_tokens for c in r.calls):>10,} {cached_share(r.calls):>6.3f} "
              f"{sum(r.rewrites.values()):>5.0f} {len(summaries):>5} "
              f"{cached_share(summaries) if summaries else 0.0:>7.3f} "
              f"{_ratios(r.calls, base):>24} {_ratios(r.fits, fits_base):>19} "
              f"{_written(r.calls, base)} "
              f"{upstream / sum(r.client):>9.3f} {r.seconds:>5.0f}")
    print("\ncost/pass: cache-adjusted cost through the proxy over the client's own pass-through "
          "(each turn cached up to the previous one, window infinite), at cached prices of 0.1, "
          "0.25 and 0.5 of input; fits: the same over the turns where pass-through fits the "
          "window; w1.25: the session's cost over pass-through with cached tokens at 0.1 and "
          "the cache writes the upstream reports at 1.25x input; rewr: prefix rewrites (mask + "
          "compact); summ: summary calls; up/client: upstream prompt tokens over the client's.")


def shadow_report(sessions: Sequence[Session], spec: agent.AgentSpec) -> None:
    """Play each session in managed and in shadow mode (``proxy.testing.shadow_run``), the fake
    writing summaries of their budget, and print what managed mode saved, what shadow mode said
    it would save, and their ratio, in prompt tokens and US dollars."""
    print(f"{'session':<9} {'summ':>4} {'managed tok':>12} {'shadow tok':>12} {'ratio':>6} "
          f"{'managed $':>10} {'shadow $':>10} {'ratio':>6} {'bytes':>5}")
    for s in sessions:
        budget = min(int(0.1 * s.window), 4096)  # the default summary_ratio and _max_tokens
        print(f"playing {s.name} managed and shadow ...", file=sys.stderr)
        m = shadow_run.play("managed", s.turns, s.window, spec, budget)
        w = shadow_run.play("shadow", s.turns, s.window, spec, budget)
        same = w.sent == w.received and w.summary_calls == 0
        print(f"{s.name:<9} {m.summary_calls:>4} {m.saved_tokens:>12,} {w.saved_tokens:>12,} "
              f"{w.saved_tokens / max(m.saved_tokens, 1):>6.3f} {m.saved_usd:>10.4f} "
              f"{w.saved_usd:>10.4f} {w.saved_usd / m.saved_usd if m.saved_usd else 0:>6.3f} "
              f"{'same' if same else 'DIFF':>5}")
    print("\nmanaged: the tokens it kept from the upstream (X-Context-Tokens-Before - After) "
          "and the money it saved, summary calls included (/metrics); shadow: what its "
          "X-Context-Shadow-Saved-* headers said; ratio: shadow over managed; summ: managed "
          "mode's summary calls (shadow makes none); bytes: whether the upstream received the "
          "client's exact bytes on every shadow turn. Prices: input $2.50, cached $0.25, output "
          "$10 per million tokens; the fake's summaries fill their budget.")


def _setting(item: str) -> tuple[str, Any]:
    name, sep, text = item.partition("=")
    if not sep or not name:
        raise ValueError(f"--policy wants FIELD=VALUE, got {item!r}")
    try:
        return name, json.loads(text)
    except json.JSONDecodeError:
        return name, text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", help="session name, e.g. 150x128k (repeatable)")
    p.add_argument("--turns", type=int, help="override every session's turn count")
    p.add_argument("--output-tokens", type=int, nargs=2, metavar=("LOW", "HIGH"),
                   help="tool output sizes the generator draws (default 1200 4200)")
    p.add_argument("--thought-words", type=int, nargs=2, metavar=("LOW", "HIGH"),
                   help="words of the assistant's text per turn (default 10 40)")
    p.add_argument("--policy", action="append", default=[], metavar="FIELD=VALUE",
                   help="a platform default for every session, e.g. masking.trigger_ratio=0.5 "
                        "(the value read as JSON, else as text; repeatable)")
    p.add_argument("--matrix", action="store_true",
                   help="play the session-cost matrix (bench/session_matrix.py); --only then "
                        "names cells or patterns, e.g. 32k/mid/s11 or '200k/*', and --policy "
                        "fields join the default policy's column")
    p.add_argument("--workers", type=int, default=2, help="processes for --matrix")
    p.add_argument("--seed", type=int, action="append", default=[],
                   help="--matrix: a cell seed to play (repeatable); by default two are drawn at "
                        "run time and printed")
    p.add_argument("--shadow", action="store_true",
                   help="play the sessions (one per shape, in_steps) in managed and in shadow "
                        "mode and print the would-be savings against the real ones")
    p.add_argument("--no-bound", action="store_true",
                   help="--matrix without its reasoning-bound column (bench/session_bound.py)")
    p.add_argument("--one-price", action="store_true",
                   help="--matrix: play the default once, its prices unknown to the proxy, "
                        "instead of once per price column (quicker, for a first look)")
    args = p.parse_args(argv)
    try:
        policy = dict(_setting(item) for item in args.policy)
        validate_layer(policy)
    except ValueError as e:
        p.error(str(e))
    if args.matrix:
        from bench import session_matrix

        return session_matrix.main(args.workers, args.only or (), policy, not args.no_bound,
                                   args.seed, args.one_price)
    sessions = [s for s in SESSIONS if not args.only or s.name in args.only]
    if args.turns:
        sessions = [replace(s, turns=args.turns) for s in sessions]
    spec = SPEC
    if args.output_tokens:
        spec = replace(spec, output_tokens=tuple(args.output_tokens))
    if args.thought_words:
        spec = replace(spec, thought_words=tuple(args.thought_words))
    if args.shadow:
        shadow_report([s for s in sessions if s.in_steps], spec)
        return 0
    results = []
    for s in sessions:
        print(f"playing {s.name} in_steps={str(s.in_steps).lower()} ...", file=sys.stderr)
        results.append(play(s, spec, policy))
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
