"""When the proxy answers a ``compaction_trigger`` itself (``proxy.http.inband.trigger``): by
configuration, or once the upstream refused it for that model; and the proxy's items expanded."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp import web

from proxy.apis import APIS
from proxy.apis import compaction_items as ci
from proxy.context.report import ContextReport
from proxy.context.stages.shared import format_summary
from proxy.http.inband import trigger

RESPONSES, MESSAGES = APIS["responses"], APIS["messages"]
ASK = {"model": "m", "input": [{"role": "user", "content": "x"}, {"type": ci.TRIGGER}]}
REFUSAL = web.json_response({"error": {
    "message": "Invalid value: 'compaction_trigger'.", "param": "input"}}, status=400)


def state(mode: str = "auto") -> Any:
    return SimpleNamespace(settings=SimpleNamespace(serves_compaction_trigger=mode),
                           upstream=SimpleNamespace(base_url="http://up/v1"),
                           trigger_refused=set())


def test_the_proxys_items_are_expanded_and_other_bodies_kept() -> None:
    item = ci.make_item("S")
    body = {"model": "m", "input": [item]}
    got, raw = trigger.expanded(body, b"raw")
    assert got["input"] == [{"type": "message", "role": "user", "content": format_summary("S")}]
    assert orjson.loads(raw) == got
    assert trigger.expanded(ASK, b"raw") == (ASK, b"raw")


def test_configured_off_the_proxy_answers_on_the_responses_api_only() -> None:
    s = state("false")
    assert trigger.answered_here(s, RESPONSES, ASK)
    assert not trigger.answered_here(s, MESSAGES, ASK)
    assert not trigger.answered_here(s, RESPONSES, {"model": "m", "input": "text"})
    assert not trigger.answered_here(state("true"), RESPONSES, ASK)


def test_under_auto_a_refusal_is_learned_per_upstream_and_model() -> None:
    s = state()
    assert not trigger.answered_here(s, RESPONSES, ASK)
    other = web.json_response({"error": {"message": "no"}}, status=400)
    assert not trigger.learned(s, RESPONSES, ASK, other)
    assert trigger.learned(s, RESPONSES, ASK, REFUSAL)
    assert s.trigger_refused == {("http://up/v1", "m")}
    assert trigger.answered_here(s, RESPONSES, ASK)
    assert not trigger.answered_here(s, RESPONSES, {**ASK, "model": "n"})
    assert not trigger.learned(state("true"), RESPONSES, ASK, REFUSAL)


def report(before: int, window: int = 1000, divider: Any = None) -> ContextReport:
    return ContextReport("c", [{"role": "user", "content": "masked"}], before, before // 2,
                         before // 2, window, 3, "none", divider=divider)


def test_a_trigger_request_goes_unmasked_when_it_fits_the_window() -> None:
    sent = trigger.unmasked(RESPONSES, ASK, report(900))
    assert sent.messages is None and sent.masked == 0 and sent.tokens_after == 900
    assert trigger.unmasked(RESPONSES, ASK, report(1100)).messages is not None
    assert trigger.unmasked(RESPONSES, ASK, report(900, divider=object())).messages is not None
    plain = {"model": "m", "input": [{"role": "user", "content": "x"}]}
    assert trigger.unmasked(RESPONSES, plain, report(900)).messages is not None
    assert trigger.unmasked(MESSAGES, ASK, report(900)).messages is not None
