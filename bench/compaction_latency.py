"""What a compaction adds to a turn's latency, with summaries prepared in the background against
the synchronous design (``compaction.prepare_ratio: 1.0``: the turn that crosses the trigger
waits for its summary).

Plays the sessions of ``bench/session_cost.py`` through the proxy with the official ``openai``
SDK, in front of the in-process fake upstream whose chat answers take ``--answer-s`` and whose
summary calls take ``--summary-s`` more (1.5 s and 10 s by default, each a run), both modes at
once (one proxy each). Masking is off unless ``--masking`` (compaction then does all the work).
Per session and mode it prints the median and worst added latency (a turn's wall time less the
upstream's answer time) of the turns that compact (a summary applied or made: ``auto``) and of
the others, the turns that waited for a summary (``X-Context-Summary-Wait-Ms`` > 0), summary
calls per compaction, the prepared summaries never used, the cached share and the
cache-adjusted cost at a cached price of 0.1 as a ratio to the synchronous design's.

    .venv/bin/python bench/compaction_latency.py --only 40x32k --summary-s 1.5 --answer-s 0.4 \
        --prepare-ratio 0.6
    .venv/bin/python bench/compaction_latency.py --only 150x128k --summary-s 10 --answer-s 2

``--per-turn`` also prints every turn's prompt and uncached tokens in each mode.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.session_cost import SESSIONS, SPEC, Script, Session, _calls  # noqa: E402
from proxy.policy.model import validate_layer  # noqa: E402
from proxy.policy.platform import PlatformConfig  # noqa: E402
from proxy.testing import agent  # noqa: E402
from proxy.testing.cost import Call, cached_share, cost  # noqa: E402
from proxy.testing.fake.faults import Fault  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request  # noqa: E402
from proxy.testing.harness import Harness  # noqa: E402

RECOMMENDED_RATIO = 0.70  # docs/configuration.md; the policy default (1.0) is off
MODES = {"prepared": None, "synchronous": 1.0}  # prepare_ratio: --prepare-ratio, or off


@dataclass
class Run:
    session: Session
    mode: str
    added_ms: list[float] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    waited_ms: list[int] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    unused: float = 0.0

    def split(self) -> tuple[list[float], list[float]]:
        """The added latencies of the turns that compact and of the others, the first turn
        left out (the process's first request warms up: tokenizer, model map, windows)."""
        turns = list(zip(self.added_ms, self.outcomes, strict=True))[1:]
        return [a for a, o in turns if o == "auto"], [a for a, o in turns if o != "auto"]


def play(session: Session, mode: str, answer_s: float, summary_s: float, masking: bool,
         prepare_ratio: float = RECOMMENDED_RATIO) -> Run:
    """Play ``session`` in ``mode`` with ``prepare_ratio`` when prepared."""
    script = Script()
    answers = Fault(status=200, delay_s=answer_s, times=-1,
                    match=lambda body: not is_summary_request(body))
    fake = FakeUpstream(models={session.model: session.window}, responder=script.respond,
                        summary_delay_s=summary_s, faults=[answers])
    layer: dict[str, Any] = {"masking.enabled": masking, "masking.in_steps": session.in_steps}
    layer["compaction.prepare_ratio"] = MODES[mode] or prepare_ratio
    run = Run(session, mode)
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake,
                    platform=PlatformConfig(defaults=validate_layer(layer))) as h, \
            openai.OpenAI(base_url=h.base_url, api_key=h.create_key("bench"),
                          max_retries=0) as client:
        messages = agent.opening_messages(SPEC)
        for assistant, results in agent.turns(SPEC, session.turns):
            script.next = assistant
            began = time.perf_counter()
            raw = client.chat.completions.with_raw_response.create(
                model=session.model, messages=messages, tools=agent.TOOLS,  # type: ignore[arg-type]
                extra_headers={"X-Conversation-Id": f"bench-{session.name}"})
            run.added_ms.append((time.perf_counter() - began - answer_s) * 1000)
            run.outcomes.append(raw.headers["X-Context-Compaction"])
            run.waited_ms.append(int(raw.headers["X-Context-Summary-Wait-Ms"]))
            messages = [*messages, assistant, *results]
        h.settle()  # the last preparations land
        run.calls = _calls(fake, 0)
        run.unused = h.metric("context_proxy_summaries_prepared_total", outcome="unused")
    return run


def _play(session: Session, answer_s: float, summary_s: float, masking: bool,
          prepare_ratio: float, mode: str) -> Run:
    return play(session, mode, answer_s, summary_s, masking, prepare_ratio)


def _ms(values: Sequence[float]) -> str:
    if not values:
        return f"{'-':>7} {'-':>7}"
    return f"{statistics.median(values):7.0f} {max(values):7.0f}"


def report(runs: Sequence[Run]) -> None:
    print(f"{'session':<9} {'steps':<5} {'mode':<11} {'compact p50/max ms':>18} "
          f"{'other p50/max ms':>16} {'waited':>6} {'comp':>4} {'summ/comp':>9} "
          f"{'unused':>6} {'share':>6} {'cost/sync':>9}")
    sync = {r.session: r for r in runs if r.mode == "synchronous"}
    for r in runs:
        compact, other = r.split()
        compactions = len(compact)
        summaries = sum(1 for c in r.calls if c.summary)
        base = sync.get(r.session)
        ratio = cost(r.calls, 0.1) / cost(base.calls, 0.1) if base else float("nan")
        print(f"{r.session.name:<9} {str(r.session.in_steps).lower():<5} {r.mode:<11} "
              f"{_ms(compact):>18} {_ms(other):>16} "
              f"{sum(1 for w in r.waited_ms if w > 0):>6} {compactions:>4} "
              f"{summaries / compactions if compactions else 0.0:>9.2f} {r.unused:>6.0f} "
              f"{cached_share(r.calls):>6.3f} {ratio:>9.4f}")
    print("\nadded: a turn's wall time less the upstream's answer time (the first turn, a "
          "warm-up, left out); compact: turns that "
          "applied or made a summary (auto); waited: turns that waited for a summary; "
          "cost/sync: cache-adjusted cost (cached price 0.1) over the synchronous design's.")


def per_turn(runs: Sequence[Run]) -> None:
    """Each turn's prompt and uncached tokens (thousands) per mode, ``*`` where it compacted:
    where two modes' costs part, the turns say why (a compaction's place, the list it left)."""
    for r in runs:
        turns = [c for c in r.calls if not c.summary]
        cells = [f"{i}:{c.prompt_tokens // 1000}k/{(c.prompt_tokens - c.cached_tokens) // 1000}k"
                 f"{'*' if outcome == 'auto' else ''}"
                 for i, (c, outcome) in enumerate(zip(turns, r.outcomes, strict=False))]
        summaries = [f"{c.prompt_tokens // 1000}k/{c.cached_tokens // 1000}k"
                     for c in r.calls if c.summary]
        print(f"\n{r.session.name} {r.mode} (turn:prompt/uncached; summary calls prompt/cached: "
              f"{' '.join(summaries) or 'none'})")
        print(" ".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", help="session name, e.g. 150x128k (repeatable)")
    p.add_argument("--steps", choices=("true", "false", "both"), default="false",
                   help="masking.in_steps of the sessions played (matters with --masking)")
    p.add_argument("--turns", type=int, help="override every session's turn count")
    p.add_argument("--answer-s", type=float, default=0.4, help="the upstream's chat answer time")
    p.add_argument("--summary-s", type=float, action="append",
                   help="summary call time (repeatable; default 1.5 and 10)")
    p.add_argument("--masking", action="store_true", help="leave masking on")
    p.add_argument("--prepare-ratio", type=float, default=RECOMMENDED_RATIO,
                   help="compaction.prepare_ratio of the prepared mode (default: 0.70, the "
                        "recommended value; the policy's default is off)")
    p.add_argument("--per-turn", action="store_true",
                   help="also print each turn's prompt and uncached tokens per mode")
    args = p.parse_args(argv)
    sessions = [s for s in SESSIONS if (not args.only or s.name in args.only)
                and (args.steps == "both" or str(s.in_steps).lower() == args.steps)]
    if args.turns:
        sessions = [Session(args.turns, s.window, s.in_steps) for s in sessions]
    for summary_s in args.summary_s or [1.5, 10.0]:
        print(f"\nsummary calls take {summary_s:g} s, answers {args.answer_s:g} s")
        runs = []
        for s in sessions:
            print(f"playing {s.name} ...", file=sys.stderr)
            with ThreadPoolExecutor(len(MODES)) as pool:
                runs += list(pool.map(partial(_play, s, args.answer_s, summary_s,
                                              args.masking, args.prepare_ratio), MODES))
        report(runs)
        if args.per_turn:
            per_turn(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
