"""The session-cost matrix's reasoning-bound column (``bench/session_cost.py --matrix``).

Each cell of ``session_matrix`` is played again through the Responses API on a model that
binds its reasoning to the history before it (``gpt-5.6-w<window>``: every reasoning item the
strict fake issues is bound to its prefix and dropped, listed in ``input_transformations``,
when that prefix changed). The client (the ``openai`` SDK) replays every output item as the
fake returned it, reasoning included, and answers each call with its
``function_call_output``. Reasoning is lost two ways, both counted: the proxy takes turns that
held it out of the list (``X-Context-Reasoning-Removed``), or the provider drops it
(``Recorded.dropped``). Each lost item is priced as its redo: ``REDO_TOKENS`` output tokens at
``OUTPUT`` × input, on top of the prompt's cost at this column's prices (cache reads ``READ``,
writes ``WRITES``). The pass-through baseline loses nothing: the client only appends.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai

from bench.session_matrix import (
    POLICIES,
    Cell,
    Played,
    _verbatim,
    book,
    by_cell,
    cheaper,
    finish,
    sound,
)
from proxy.policy.model import validate_layer
from proxy.policy.platform import PlatformConfig
from proxy.testing import agent
from proxy.testing.cost import Call, cached_share, passthrough, priced
from proxy.testing.fake.fake_apis import RESPONSES, as_chat
from proxy.testing.fake_upstream import FakeUpstream, approx_tokens, is_summary_request
from proxy.testing.harness import Harness

READ = 0.05  # cache reads on the newest models (Opus 5.5, OpenAI's newest)
WRITES = (1.25, 2.0)  # cache writes: 5-minute and Anthropic's 1-hour cache
REDO_TOKENS = 300  # output tokens of reasoning a lost item makes the model redo
OUTPUT = 8.0  # the output price over the input price (GPT-5 family; Opus 5.5 is 5)


def bound_model(cell: Cell) -> str:
    return f"gpt-5.6-w{cell.window // 1000}k"


def _tools(chat_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", **t["function"]} for t in chat_tools]


def _outputs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results as Responses items (a user's follow-up as a message)."""
    return [{"type": "function_call_output", "call_id": r["tool_call_id"],
             "output": r["content"]} if r["role"] == "tool" else
            {"type": "message", "role": r["role"], "content": r["content"]} for r in results]


def play_bound(cell: Cell, policy: str, extra: dict[str, Any] | None = None) -> Played:
    """Play ``cell`` on the bound model under ``POLICIES[policy]`` and ``extra``."""
    turns, tools = cell.turns(), cell.tools()
    spec, model = cell.spec(turns), bound_model(cell)
    nxt: dict[str, Any] = {}
    fake = FakeUpstream(models={model: cell.window}, responder=lambda body: nxt)
    layer = validate_layer({**POLICIES[policy], **(extra or {})})
    out = Played(cell, policy, bound=True)
    started, conversation = time.monotonic(), f"bound-{policy}"
    opening = agent.opening_messages(spec)
    items: list[Any] = [{"type": "message", "role": m["role"], "content": m["content"]}
                        for m in opening[1:]]
    with tempfile.TemporaryDirectory() as tmp, \
            Harness(Path(tmp), fake=fake, platform=PlatformConfig(defaults=layer)) as h:
        key = h.create_key("bench")
        client = openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0)
        messages, last_sent, sent_tokens = opening, "", 0
        for turn, (assistant, results) in enumerate(agent.turns(spec, turns), 1):
            nxt.clear()
            nxt.update(assistant)
            start = len(fake.requests)
            try:
                raw = client.responses.with_raw_response.create(
                    model=model, instructions=str(opening[0]["content"]), input=items,
                    tools=_tools(tools), reasoning={"effort": "medium"},  # type: ignore[arg-type]
                    extra_headers={"X-Conversation-Id": conversation})
                out.reasoning_lost += int(raw.headers.get("X-Context-Reasoning-Removed", "0"))
                items += [o.model_dump(exclude_none=True) for o in raw.parse().output]
            except openai.APIError:
                out.errors += 1
                items += [{"type": "function_call", "call_id": c["id"], "name":
                           c["function"]["name"], "arguments": c["function"]["arguments"]}
                          for c in assistant["tool_calls"]]
            items += _outputs(results)
            prompt = approx_tokens(messages, tools)
            grown = sent_tokens + prompt - (out.client[-1] if out.client else 0)
            out.client.append(prompt)
            for rec in fake.requests[start:]:
                if rec.path != RESPONSES or rec.usage is None:
                    continue
                details = rec.usage.get("input_tokens_details") or {}
                chat = as_chat(RESPONSES, rec.json)
                call = Call(int(rec.usage["input_tokens"]), int(details.get("cached_tokens", 0)),
                            summary=is_summary_request(chat),
                            written_tokens=int(details.get("cache_write_tokens", 0)))
                if not book(out, call, turn, prompt, grown):
                    continue
                out.reasoning_lost += rec.dropped
                out.over += call.prompt_tokens > cell.window
                last_sent, sent_tokens = json.dumps(rec.json), call.prompt_tokens
                if policy != "off" and not _verbatim(chat["messages"], messages, 5):
                    out.verbatim = False
            messages = [*messages, assistant, *results]
        finish(out, h, key, conversation, spec, last_sent)
        client.close()
    out.seconds = time.monotonic() - started
    return out


def bound_ratios(p: Played) -> dict[str, float]:
    """Session and fits-turns cost over pass-through at this column's prices, the redo of
    every lost reasoning item included (at each write price)."""
    base = passthrough(p.client)
    fits_base = [c for c, n in zip(base, p.client, strict=True) if n <= p.cell.window]
    redo = p.reasoning_lost * REDO_TOKENS * OUTPUT
    out = {}
    for w in WRITES:
        out[f"s{w}"] = (priced(p.calls, READ, w) + redo) / priced(base, READ, w)
        out[f"f{w}"] = (priced(p.fits, READ, w) + redo) / priced(fits_base, READ, w) \
            if fits_base else 0.0
    return out


def report_bound(results: Sequence[Played]) -> list[str]:
    """Print the reasoning-bound column; return the cells where the default fails it."""
    by = by_cell(results)
    print(f"\nreasoning-bound column ({'gpt-5.6'}: reads {READ}, writes "
          f"{'/'.join(map(str, WRITES))}, a lost item redone at {REDO_TOKENS} output tokens x "
          f"{OUTPUT})")
    print(f"{'cell':<22} {'policy':<7} {'s1.25':>5} {'s2.0':>5} {'f1.25':>5} {'f2.0':>5} "
          f"{'cach':>5} {'rlost':>5} {'summ':>4} {'s.cch':>5} {'lost':>4} {'over':>4} "
          f"{'err':>3}  verdict")
    losses = []
    for cell in sorted(by, key=lambda c: (c.window, c.coding, c.outputs, c.large_prompt, c.seed)):
        row = by[cell]
        rs = {k: bound_ratios(v) for k, v in row.items()}
        verdict = cheaper(rs, WRITES, ()) if {"default", "off", "flat"} <= rs.keys() else []
        verdict += [v for v in sound(row["default"]) if v != "verbatim"] \
            if "default" in row else []
        if verdict:
            losses.append(f"{cell.name}: {', '.join(verdict)}")
        for i, name in enumerate(n for n in POLICIES if n in row):
            p, r = row[name], rs[name]
            summaries = [c for c in p.calls if c.summary]
            head = f"{cell.name:<22}" if i == 0 else " " * 22
            tail = ("  ok" if not verdict else "  FAILS " + ",".join(verdict)) if i == 0 else ""
            print(f"{head} {name:<7} {r['s1.25']:5.2f} {r['s2.0']:5.2f} {r['f1.25']:5.2f} "
                  f"{r['f2.0']:5.2f} {cached_share(p.calls):5.2f} {p.reasoning_lost:5} "
                  f"{len(summaries):4} {cached_share(summaries) if summaries else 0.0:5.2f} "
                  f"{len(p.missing):4} {p.over:4} {p.errors:3}{tail}")
    print(f"default fails the reasoning-bound column in {len(losses)} of {len(by)} cells"
          + "".join(f"\n  {x}" for x in losses))
    return losses
