"""What a request shares with the last one is reused (checks, token counts) and nothing else:
over random edits of a conversation, the reused answers equal those computed from scratch."""

from __future__ import annotations

import random
from typing import Any

import orjson
from factories import assistant, system, tool_call, tool_result, user, words

from proxy.context.checked import CheckedLists
from proxy.context.history import History
from proxy.context.tokens.counter import TokenCounter
from proxy.errors import ApiError
from proxy.http.parse import check_chat

MODEL = "gpt-4o"


def verdict(messages: list[Any], checked: CheckedLists | None) -> tuple[Any, ...]:
    """What the parser says of ``messages``: accepted, or the refusal's status and wording."""
    body = {"model": MODEL, "messages": messages}
    try:
        check_chat(orjson.dumps(body), body, checked)
    except ApiError as e:
        return (e.status, e.param, e.message)
    return ("ok",)


def edit(rng: random.Random, msgs: list[Any], n: int) -> list[Any]:
    """The conversation after one client edit: a new turn, a changed last or earlier message,
    a dropped tail, or a tool result that answers nothing."""
    kind = rng.randrange(6)
    out = list(msgs)
    if kind == 0:
        call = tool_call("read", call_id=f"c{n}")
        out += [assistant(None, call), tool_result(call, words(rng.randrange(5, 60), seed=n))]
    elif kind == 1:
        out.append(user(f"question {n}"))
    elif kind == 2 and len(out) > 2:
        out[-1] = {**out[-1], "content": words(rng.randrange(3, 40), seed=n)}
    elif kind == 3 and len(out) > 3:
        i = rng.randrange(2, len(out))
        out[i] = {**out[i], "content": words(rng.randrange(3, 40), seed=n + 7)}
    elif kind == 4 and len(out) > 3:
        out = out[:rng.randrange(2, len(out))]
    else:
        out.append({"role": "tool", "tool_call_id": f"nobody{n}", "content": "x"})
    return out


def test_reused_checks_and_counts_equal_fresh_ones() -> None:
    rng = random.Random(2024)
    checked, counter = CheckedLists(), TokenCounter()
    history, fresh = History(counter), TokenCounter()
    msgs: list[Any] = [system("S"), user("task")]
    accepted = refused = 0
    for n in range(300):
        candidate = edit(rng, msgs, n)
        got = verdict(candidate, checked)
        assert got == verdict(candidate, None), (n, candidate)
        if got != ("ok",):
            refused += 1
            continue  # a client would fix its request: keep the last accepted list
        accepted += 1
        msgs = candidate
        known = history.recall("c1", msgs, MODEL)
        pairs = known.pairs_for(counter, msgs, MODEL)
        assert pairs == fresh.token_pairs(msgs, MODEL), n
        history.remember("c1", msgs, MODEL, pairs, None, 1000)
    assert accepted > 100 and refused > 20  # both ways were exercised
