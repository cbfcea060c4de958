"""Compaction switched off (a supported admin choice): masking alone must keep every request in
the window, on every API, across the session matrix's shapes (``bench/session_matrix.py``).

Each selected cell is played at the default policy with ``compaction.enabled: false`` three
times, through the official SDKs in front of the strict in-process fake (which refuses a
request over the model's window): chat completions (``openai``), the Responses API on a model
that binds reasoning to its history (``openai``, as ``bench/session_bound.py`` plays it) and
the Messages API (``anthropic``). It prints, per cell and API, the requests over the window
and the failed ones (both must be 0) and the largest request's share of the window.

    .venv/bin/python bench/compaction_off.py                      # every cell, two seeds drawn
    .venv/bin/python bench/compaction_off.py --only '32k/*' --seed 11
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import anthropic

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.session_bound import play_bound  # noqa: E402
from bench.session_matrix import Cell, drawn_seeds, play, selected  # noqa: E402
from proxy.policy.model import validate_layer  # noqa: E402
from proxy.policy.platform import PlatformConfig  # noqa: E402
from proxy.testing import agent  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402
from proxy.testing.harness import Harness  # noqa: E402

OFF = {"compaction.enabled": False}
APIS = ("chat", "responses", "messages")


def play_messages(cell: Cell) -> tuple[int, int, float]:
    """``cell`` through the Messages API with compaction off: (requests over the window,
    failed requests, the largest request's share of the window)."""
    turns, model = cell.turns(), f"claude-agent-w{cell.window // 1000}k"
    spec, chat_tools = cell.spec(turns), cell.tools()
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in chat_tools]
    opening = agent.opening_messages(spec)
    nxt: dict[str, Any] = {}
    fake = FakeUpstream(models={model: cell.window}, responder=lambda body: nxt)
    over = errors = 0
    with tempfile.TemporaryDirectory() as tmp, Harness(
            Path(tmp), fake=fake, platform=PlatformConfig(defaults=validate_layer(OFF))) as h, \
            anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"),
                                api_key=h.create_key("bench"), max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": opening[1]["content"]}]
        for assistant, results in agent.turns(spec, turns):
            nxt.clear()
            nxt.update(assistant)
            try:
                answer = client.messages.create(
                    model=model, max_tokens=1024, system=str(opening[0]["content"]),
                    tools=tools, messages=messages,  # type: ignore[arg-type]
                    extra_headers={"X-Conversation-Id": "off-messages"})
                content = [b.model_dump(exclude_none=True) for b in answer.content]
            except anthropic.APIError:
                errors += 1
                content = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                            "input": {}} for c in assistant["tool_calls"]]
            messages += [{"role": "assistant", "content": content}, _user_turn(results)]
    prompts = [_prompt(r.usage) for r in fake.requests if r.usage is not None]
    over = sum(p > cell.window for p in prompts)
    return over, errors, max(prompts, default=0) / cell.window


def _user_turn(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The results of a turn as one user message (a user's follow-up as its text)."""
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": r["tool_call_id"], "content": r["content"]}
        if r["role"] == "tool" else {"type": "text", "text": r["content"]} for r in results]
    return {"role": "user", "content": blocks}


def _prompt(usage: dict[str, Any]) -> int:
    return int(usage.get("input_tokens", 0)) + int(usage.get("cache_read_input_tokens", 0)) + \
        int(usage.get("cache_creation_input_tokens", 0))


def play_api(cell: Cell, api: str) -> tuple[int, int, float]:
    """``cell`` with compaction off through ``api``: (over, failed, largest share)."""
    if api == "messages":
        return play_messages(cell)
    p = play(cell, "default", OFF) if api == "chat" else play_bound(cell, "default", OFF)
    return p.over, p.errors, max((c.prompt_tokens for c in p.calls), default=0) / cell.window


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="cell names or patterns")
    ap.add_argument("--seed", type=int, action="append", default=[], help="seeds (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    seeds = tuple(args.seed) or drawn_seeds()
    print(f"seeds {', '.join(map(str, seeds))}", flush=True)
    cells = selected(args.only, seeds)
    jobs = [(c, api) for c in cells for api in APIS]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(play_api, *zip(*jobs, strict=True)))
    bad = 0
    print(f"{'cell':<26} " + " ".join(f"{a + ' over/err/max':>24}" for a in APIS))
    for n, cell in enumerate(cells):
        row = results[n * len(APIS):(n + 1) * len(APIS)]
        bad += sum(1 for over, errors, _ in row if over or errors)
        print(f"{cell.name:<26} " + " ".join(
            f"{over:>10} {errors:>5} {share:>7.0%}" for over, errors, share in row))
    print(f"\n{bad} of {len(jobs)} sessions sent a request over the window or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
