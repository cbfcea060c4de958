"""When the proxy answers a ``compaction_trigger`` itself (``proxy.http.inband.trigger``): by
configuration, or once the upstream refused it for that model; and the proxy's items expanded."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp import web

from proxy.apis import APIS
from proxy.apis import compaction_items as ci
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
