"""The session-cost matrix of ``bench/session_cost.py --matrix``: every session shape × policy.

A cell is a session shape (window, tool output sizes, fixed prompt, coding writes, user
follow-ups, an idle gap) and a seed; each cell is played through the proxy (``openai`` SDK,
in-process fake upstream) with the default policy, masking off and ``masking.in_steps: false``;
the client's own pass-through is priced from the client's prompts
(``proxy.testing.cost.passthrough``). Plays run in a pool of processes. Price columns
(``COLUMNS``): cache reads at 0.1 or 0.05 of input; the tokens the upstream reports written to
the cache (``cache_write_tokens``: every uncached token of a prompt of 1,024 tokens or more,
rounded down to the cache's steps of 128) at 1.0, 1.25 or 2 of input, the rest of the prompt at
1.0 (the pass-through baseline writes by the same rule). The default policy decides masking
steps by price, so it is played once per column with that column's prices in its ``models``
table. Summary calls' answers are left out, as are every answer's tokens (the fake's summaries
are short). The idle cells' gap (halfway) outlasts the provider's cache: the cache is emptied.

Turn counts are trimmed per shape: a session plays until the client's transcript reaches
``REACH`` × window (between ``MIN_TURNS`` and ``MAX_TURNS`` turns), enough to show masking and
compaction at work; the long cells (``LONG``: 150 turns at 128k, 300 at 200k, with and without
user follow-ups and coding writes) play whole agent sessions. Cells that cannot be played
honestly are left out: where the fixed prompt and the largest output together do not fit the
window (16k-token outputs in a 16k window, a 20k fixed prompt in a 16k window or beside
16k-token outputs in a 32k one).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import random
import tempfile
import textwrap
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from proxy.context.stages.compact import LASTING_CAP
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.cost import Call, cached_share, passthrough, priced
from proxy.testing.fake_upstream import FakeUpstream, approx_tokens, is_summary_request
from proxy.testing.harness import Harness
from proxy.testing.spills import spilled as spills

READ = 0.1
LOW_READ = 0.05  # cache reads on the newest models (Opus 5.5, OpenAI's newest): column s.05
WRITES = (1.0, 1.25)
COLUMNS = {"s1.0": (READ, 1.0), "s1.25": (READ, 1.25), "s.05": (LOW_READ, 1.25),
           "s2.0": (READ, 2.0)}  # (cache read, cache write) in input prices; s2.0: Anthropic's
# 1-hour cache. The default policy is played once per column, with the column's prices in its
# ``models`` table (masking decides by them); masking off and in_steps false read no price.
MAIN = "s1.25"  # the default's play whose counts (cached share, rewrites, ...) the table shows
SEEDS = (11, 12)  # the documented cells' seeds; a run draws its own unless told (--seed)
FOLLOW_EVERY = 7  # the follow-up shape: a user message after every seventh turn's results
WINDOWS = (16_000, 32_000, 128_000, 200_000)
OUTPUTS = {"small": (200, 800), "mid": (1000, 4000), "large": (4000, 16000)}
REACH, MIN_TURNS, MAX_TURNS = 1.4, 24, 120
LONG = ((128_000, 150), (200_000, 300))  # whole agent sessions: (window, turns)
LONG_SHAPES = ((False, False), (False, True), (True, False))  # (coding, follow-ups)
POLICIES: dict[str, dict[str, Any]] = {
    "default": {}, "off": {"masking.enabled": False}, "flat": {"masking.in_steps": False}}
FIXED_TOKENS = 20_000  # a large fixed prompt: system and tools, as Claude Code sends
FULL = LASTING_CAP  # a request over this share of the window leaves its answer no room: it
# does not fit without a summary


@dataclass(frozen=True)
class Cell:
    window: int
    outputs: str
    large_prompt: bool
    coding: bool
    seed: int
    follow: bool = False  # the user follows up every FOLLOW_EVERY turns
    idle: bool = False  # an idle gap past the provider's cache life halfway through
    length: int = 0  # a long session's turns (``LONG``); 0: trimmed to REACH x window

    @property
    def name(self) -> str:
        shape = "coding" if self.coding else self.outputs
        prompt = ("+20k" if self.large_prompt else "") + ("+fu" if self.follow else "") + \
            ("+idle" if self.idle else "")
        long = f"x{self.length}" if self.length else ""
        return f"{self.window // 1000}k{long}/{shape}{prompt}/s{self.seed}"

    @property
    def model(self) -> str:
        return f"gpt-4o-w{self.window // 1000}k"

    def spec(self, turns: int) -> agent.AgentSpec:
        low, high = OUTPUTS[self.outputs]
        facts = tuple((t, f"NOTE: planted fact FACT-{self.seed}-{t}.")
                      for t in sorted({2, turns // 3, turns // 2}))
        system = agent.SYSTEM
        if self.large_prompt:
            rng = random.Random(self.seed)
            system += "\n" + agent.tool_output(rng, FIXED_TOKENS // 2, 0)
        return agent.AgentSpec(seed=self.seed, output_tokens=(low, high), system=system,
                               thought_words=(10, 40), facts=facts,
                               write_every=4 if self.coding else 0,
                               follow_every=FOLLOW_EVERY if self.follow else 0)

    def tools(self) -> list[dict[str, Any]]:
        tools = agent.CODING_TOOLS if self.coding else agent.TOOLS
        if self.large_prompt:
            rng = random.Random(self.seed + 1)
            tools = [*tools, *({"type": "function", "function": {
                "name": f"tool_{i}", "description": agent.tool_output(rng, 360, i),
                "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
                for i in range(20))]
        return tools

    def turns(self) -> int:
        if self.length:
            return self.length
        low, high = OUTPUTS[self.outputs]
        per_turn = 1.2 * (low + high) / 2 + 60 + (1.2 * 5000 / 4 if self.coding else 0)
        return max(MIN_TURNS, min(MAX_TURNS, math.ceil(REACH * self.window / per_turn)))


def playable(window: int, outputs: str, large_prompt: bool) -> bool:
    """Whether the fixed prompt and the largest tool output the shape draws (1.35 x its top
    size, ``proxy.testing.agent``) fit the window together: the newest results stay verbatim
    and the fixed prompt is never summarized, so otherwise no policy can keep a turn in it."""
    return FIXED_TOKENS * large_prompt + 1.35 * OUTPUTS[outputs][1] <= window


def cells(seeds: Sequence[int] = SEEDS) -> list[Cell]:
    out = []
    for seed in seeds:
        for window in WINDOWS:
            out += [Cell(window, outputs, large, False, seed)
                    for outputs in OUTPUTS for large in (False, True)
                    if playable(window, outputs, large)]
            out.append(Cell(window, "mid", False, True, seed))
            out.append(Cell(window, "mid", False, False, seed, follow=True))
            out.append(Cell(window, "mid", False, False, seed, idle=True))
        out += [Cell(window, "mid", False, coding, seed, follow=follow, length=length)
                for window, length in LONG for coding, follow in LONG_SHAPES]
    return out


def drawn_seeds(count: int = 2) -> tuple[int, ...]:
    """Seeds drawn at run time, so no rule is tuned to the cells one run plays."""
    rng = random.SystemRandom()
    return tuple(rng.randrange(100, 100_000) for _ in range(count))


@dataclass
class Played:
    cell: Cell
    policy: str
    calls: list[Call] = field(default_factory=list)
    fits: list[Call] = field(default_factory=list)
    client: list[int] = field(default_factory=list)
    summary_turns: list[int] = field(default_factory=list)
    needed: set[int] = field(default_factory=set)  # summary turns whose request would not
    # have fit the window without a new summary (the previous request as sent, grown, over
    # FULL x window)
    rewrites: float = 0.0
    over: int = 0  # main calls over the window
    missing: list[str] = field(default_factory=list)  # planted facts neither sent nor spilled
    verbatim: bool = True  # the newest keep_recent results as the client sent them, every turn
    errors: int = 0
    seconds: float = 0.0
    reasoning_lost: int = 0  # on a reasoning-bound model: items removed or dropped
    bound: bool = False  # played on a reasoning-bound model (``bench/session_bound.py``)
    column: str = ""  # the price column the default was played at ("": the policy reads none)


def _verbatim(sent: list[dict[str, Any]], client: list[dict[str, Any]], keep: int) -> bool:
    want = {m["tool_call_id"]: m["content"] for m in client if m.get("role") == "tool"}
    newest = [m["tool_call_id"] for m in client if m.get("role") == "tool"][-keep:]
    got = {m.get("tool_call_id"): m.get("content") for m in sent if m.get("role") == "tool"}
    return all(got.get(c, want[c]) == want[c] for c in newest)


def priced_policy(cell: Cell, column: str, model: str | None = None) -> dict[str, Any]:
    """The ``models`` entry that gives ``cell``'s model (or ``model``) the prices of
    ``column``, in dollars per million tokens (input at 1)."""
    read, write = COLUMNS[column]
    return {"models": {model or cell.model: {
        "context_window": cell.window, "input_per_mtok": 1.0, "cached_per_mtok": read,
        "write_per_mtok": write}}}


def play(cell: Cell, policy: str, extra: dict[str, Any] | None = None,
         column: str = "") -> Played:
    """Play ``cell`` under ``POLICIES[policy]`` and ``extra`` (platform defaults), at the
    prices of ``column`` (none: the model's are unknown)."""
    turns, tools = cell.turns(), cell.tools()
    spec = cell.spec(turns)
    nxt: dict[str, Any] = {}
    fake = FakeUpstream(models={cell.model: cell.window}, responder=lambda body: nxt)
    layer = validate_layer({**POLICIES[policy], **(extra or {}),
                            **(priced_policy(cell, column) if column else {})})
    out = Played(cell, policy, column=column)
    started, conversation = time.monotonic(), f"matrix-{policy}"
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake, platform=PlatformConfig(defaults=layer)) as h:
        key = h.create_key("bench")
        client = openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0)
        messages, last_sent, sent_tokens = agent.opening_messages(spec), None, 0
        for turn, (assistant, results) in enumerate(agent.turns(spec, turns), 1):
            nxt.clear()
            nxt.update(assistant)
            start = len(fake.requests)
            if cell.idle and turn == turns // 2:
                fake.cache.expire()
            try:
                client.chat.completions.create(
                    model=cell.model, messages=messages, tools=tools,  # type: ignore[arg-type]
                    extra_headers={"X-Conversation-Id": conversation})
            except openai.APIError:
                out.errors += 1
            prompt = approx_tokens(messages, tools)
            grown = sent_tokens + prompt - (out.client[-1] if out.client else 0)
            out.client.append(prompt)
            for rec in fake.requests[start:]:
                if rec.path != "/v1/chat/completions" or rec.usage is None:
                    continue
                body = rec.json
                details = rec.usage.get("prompt_tokens_details") or {}
                call = Call(int(rec.usage["prompt_tokens"]), int(details.get("cached_tokens", 0)),
                            summary=is_summary_request(body),
                            written_tokens=int(details.get("cache_write_tokens", 0)))
                if book(out, call, turn, prompt, grown):  # the turn's main call
                    out.over += call.prompt_tokens > cell.window
                    last_sent, sent_tokens = body["messages"], call.prompt_tokens
                    if policy != "off" and not _verbatim(last_sent, messages, 5):
                        out.verbatim = False
            messages = [*messages, assistant, *results]
        finish(out, h, key, conversation, spec, json.dumps(last_sent))
        client.close()
    out.seconds = time.monotonic() - started
    return out


def book(out: Played, call: Call, turn: int, prompt: int, grown: int) -> bool:
    """Count one upstream call of ``turn`` (``prompt``: the client's tokens; ``grown``: the
    last request as sent, grown by the turn); whether it was the turn's main call."""
    out.calls.append(call)
    if prompt <= out.cell.window:
        out.fits.append(call)
    if call.summary:
        out.summary_turns.append(turn)
        if grown > FULL * out.cell.window:
            out.needed.add(turn)
    return not call.summary


def finish(out: Played, h: Harness, key: str, conversation: str, spec: agent.AgentSpec,
           last_sent: str) -> None:
    """A played session's planted facts neither in its last upstream request (``last_sent``,
    its JSON) nor in a spill that names, and its prefix rewrites."""
    spilled = "".join(text for _, text in spills(h.base_url, key, conversation, last_sent))
    out.missing = [f"FACT-{out.cell.seed}-{t}" for t, _ in spec.facts
                   if f"FACT-{out.cell.seed}-{t}" not in last_sent + spilled]
    out.rewrites = sum(h.state.metrics.registry.get_sample_value(
        "context_proxy_prefix_rewrites_total", {"stage": s}) or 0.0
        for s in ("mask", "compact"))


def ratios(p: Played) -> dict[str, float]:
    """Session cost over pass-through in each price column, and over the turns pass-through
    fits (``f1.0``, ``f1.25``: reads at 0.1)."""
    base = passthrough(p.client)
    fits_base = [c for c, n in zip(base, p.client, strict=True) if n <= p.cell.window]
    out = {col: priced(p.calls, r, w) / priced(base, r, w) for col, (r, w) in COLUMNS.items()}
    for w in WRITES:
        out[f"f{w}"] = priced(p.fits, READ, w) / priced(fits_base, READ, w) if fits_base \
            else 0.0
    return out


def default_ratios(plays: dict[str, Played]) -> dict[str, float]:
    """The default's figures, each column from its play at that column's prices (``plays``:
    column -> play; a single play stands for every column)."""
    if len(plays) == 1:
        return ratios(next(iter(plays.values())))
    out = {col: ratios(p)[col] for col, p in plays.items()}
    for w in WRITES:
        out[f"f{w}"] = ratios(plays[f"s{w}"])[f"f{w}"]
    return out


def consecutive(turns: Sequence[int], needed: AbstractSet[int] = frozenset()) -> int:
    """Pairs of consecutive turns that both made a summary call, the second one's request
    fitting the window without it (those in ``needed`` did not)."""
    seen = sorted(set(turns))
    return sum(1 for a, b in itertools.pairwise(seen) if b == a + 1 and b not in needed)


def selected(only: Sequence[str] = (), seeds: Sequence[int] = SEEDS) -> list[Cell]:
    """The cells of ``seeds`` named by ``only`` (names or shell patterns, e.g. ``200k/*``);
    all when empty."""
    return [c for c in cells(seeds)
            if not only or any(fnmatch.fnmatchcase(c.name, o) for o in only)]


def _play(bound: bool, cell: Cell, policy: str, extra: dict[str, Any] | None,
          column: str) -> Played:
    if not bound:
        return play(cell, policy, extra, column)
    from bench.session_bound import play_bound  # it builds on this module

    return play_bound(cell, policy, extra)


def run(workers: int, only: Sequence[str] = (), extra: dict[str, Any] | None = None,
        bound: bool = True, seeds: Sequence[int] = SEEDS, one_price: bool = False
        ) -> list[Played]:
    """Every selected cell under every policy (the default once per price column, unless
    ``one_price``), and again on a reasoning-bound model (``bound``); ``extra`` fields join
    the default policy."""
    def columns(b: bool, p: str) -> Sequence[str]:
        return tuple(COLUMNS) if p == "default" and not b and not one_price else ("",)

    jobs = [(b, c, p, extra if p == "default" else None, col)
            for b in (False, True)[:1 + bound] for c in selected(only, seeds) for p in POLICIES
            for col in columns(b, p)]
    jobs.sort(key=lambda j: -j[1].turns() * j[1].window)  # longest first: the pool ends together
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_play, *zip(*jobs, strict=True)))


def _row(p: Played, r: dict[str, float]) -> str:
    summaries = [c for c in p.calls if c.summary]
    return (f"{p.policy:<7} {r['s1.0']:5.2f} {r['s1.25']:5.2f} {r['s.05']:5.2f} {r['s2.0']:5.2f} "
            f"{r['f1.0']:5.2f} {r['f1.25']:5.2f} "
            f"{cached_share(p.calls):5.2f} {p.rewrites:4.0f} {len(summaries):4} "
            f"{cached_share(summaries) if summaries else 0.0:5.2f} "
            f"{consecutive(p.summary_turns, p.needed):4} "
            f"{len(p.missing):4} {p.over:4} {'y' if p.verbatim else 'N':>3} {p.errors:3}")


def cheaper(rs: dict[str, dict[str, float]], writes: Sequence[float] = WRITES,
            sessions: Sequence[str] = ("s.05",)) -> list[str]:
    """Acceptance 1 where the default loses: its session cost above 1.05x the cheaper of
    masking off and ``in_steps: false`` (at each of ``writes`` and in each other column of
    ``sessions``), or above 1.05x masking off over the fits turns."""
    out = []
    for w in writes:
        if rs["default"][f"f{w}"] > 1.05 * rs["off"][f"f{w}"]:
            out.append(f"fits@{w}")
    for col in [*(f"s{w}" for w in writes), *sessions]:
        if rs["default"][col] > 1.05 * min(rs["off"][col], rs["flat"][col]):
            out.append(f"session@{col.removeprefix('s')}")
    return out


def sound(p: Played) -> list[str]:
    """Acceptance 3 where ``p`` fails it: a turn over the window, a failed request, a result
    of the newest five not verbatim, a planted fact lost, an unneeded summary call on the turn
    after one, summary calls under 70% cached."""
    summaries = [c for c in p.calls if c.summary]
    checks = {"over": p.over > 0, "err": p.errors > 0, "verbatim": not p.verbatim,
              "lost": bool(p.missing), "cons": consecutive(p.summary_turns, p.needed) > 0,
              "s.cch": bool(summaries) and cached_share(summaries) < 0.70}
    return [name for name, failed in checks.items() if failed]


def by_cell(results: Sequence[Played]) -> dict[Cell, dict[str, Played]]:
    """Cell -> policy -> its played session (the default's at the ``MAIN`` column; its plays
    at the other columns as ``default@<column>``)."""
    by: dict[Cell, dict[str, Played]] = {}
    for p in results:
        key = p.policy if p.column in ("", MAIN) else f"{p.policy}@{p.column}"
        by.setdefault(p.cell, {})[key] = p
    return by


def rates(row: dict[str, Played]) -> dict[str, dict[str, float]]:
    """Policy -> its figures (``ratios``; the default's from its play at each column)."""
    rs = {k: ratios(v) for k, v in row.items() if "@" not in k}
    plays = {k.split("@")[1]: v for k, v in row.items() if k.startswith("default@")}
    if plays and "default" in row:
        rs["default"] = default_ratios({**plays, MAIN: row["default"]})
    return rs


def worst(rs: dict[str, dict[str, float]]) -> float:
    """The default's highest ratio to the cheaper of masking off and in_steps false, over the
    session columns (0 when the row lacks one of them)."""
    if not {"default", "off", "flat"} <= rs.keys():
        return 0.0
    return max(rs["default"][c] / min(rs["off"][c], rs["flat"][c]) for c in COLUMNS)


def report(results: Sequence[Played]) -> list[str]:
    """Print the table; return the cells where the default fails acceptance 1 or 3."""
    by = by_cell([p for p in results if not p.bound])
    print(f"{'cell':<26} {'turns':>5} {'policy':<7} {'s1.0':>5} {'s1.25':>5} {'s.05':>5} "
          f"{'s2.0':>5} {'f1.0':>5} "
          f"{'f1.25':>5} {'cach':>5} {'rewr':>4} {'summ':>4} {'s.cch':>5} {'cons':>4} "
          f"{'lost':>4} {'over':>4} {'vrb':>3} {'err':>3}  verdict")
    losses = []
    table = {cell: rates(row) for cell, row in by.items()}
    for cell in sorted(by, key=lambda c: (-worst(table[c]), c.name)):  # the worst cell first
        row, rs = by[cell], table[cell]
        verdict = cheaper(rs, WRITES, ("s.05", "s2.0")) \
            if {"default", "off", "flat"} <= rs.keys() else []
        verdict += [v for d in sorted(k for k in row if k.startswith("default"))
                    for v in sound(row[d]) if v not in verdict]
        if verdict:
            losses.append(f"{cell.name}: {', '.join(verdict)}")
        for i, name in enumerate(n for n in POLICIES if n in row):
            head = f"{cell.name:<26} {cell.turns():>5}" if i == 0 else " " * 32
            tail = ("  ok" if not verdict else "  FAILS " + ",".join(verdict)) if i == 0 else ""
            print(f"{head} {_row(row[name], rs[name])}{tail}")
    print(textwrap.fill(
        "s1.0/s1.25/s2.0: session cost over pass-through, cache writes at 1.0/1.25/2x input "
        "(reads 0.1); s.05: the same with reads at 0.05 and writes at 1.25 (the default played "
        "at each column's prices); f*: the same over the "
        "turns pass-through fits the window (reads 0.1); cach: cached share; "
        "rewr: prefix rewrites; summ: summary calls; s.cch: their cached share; cons: "
        "consecutive turns both making a summary call where the second one's request would "
        f"have fit the window without it (under {FULL:.0%} of it); lost: planted facts neither "
        "sent nor in a spill; over: main calls over the window; vrb: newest 5 results "
        "verbatim; err: failed requests. Verdict: default <= 1.05x min(off, flat) per session "
        "in every column and <= 1.05x off over the fits turns (session@col, fits@w), and "
        "the default's cons, lost, over, err 0, vrb y and s.cch >= 0.70 where it makes "
        "summary calls, at every column's prices. The worst cell comes first.", 100,
        initial_indent="\n"))
    print(f"default fails in {len(losses)} of {len(by)} cells" +
          "".join(f"\n  {x}" for x in losses))
    return losses


def main(workers: int, only: Sequence[str] = (), extra: dict[str, Any] | None = None,
         bound: bool = True, seeds: Sequence[int] = (), one_price: bool = False) -> int:
    """Play and report the matrix; ``seeds`` (none: two drawn now, printed for a replay)."""
    started = time.monotonic()
    seeds = tuple(seeds) or drawn_seeds()
    print(f"seeds {', '.join(map(str, seeds))} (replay: "
          + " ".join(f"--seed {s}" for s in seeds) + ")", flush=True)
    results = run(workers, only, extra, bound, seeds, one_price)
    report(results)
    if bound:
        from bench.session_bound import report_bound

        report_bound([p for p in results if p.bound])
    print(f"played {len(results)} sessions in {time.monotonic() - started:.0f} s "
          f"with {workers} processes")
    return 0
