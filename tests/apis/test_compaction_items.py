"""The agents' in-band compaction items (``proxy.apis.compaction_items``) and what the Responses
adapter does with the providers' own context items (SPEC section 2): kept verbatim, in place,
the trigger last, through masking and compaction."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.apis import compaction_items as ci
from proxy.context.adapters.openai_responses import read
from proxy.context.stages.shared import SUMMARY_OPEN, format_summary

OPAQUE = [{"type": "compaction", "id": "cmp_up", "encrypted_content": "upstream-blob"},
          {"type": "configuration_update", "settings": {"x": 1}},
          {"type": "additional_tools", "tools": [{"type": "function", "name": "f"}]},
          {"type": "program", "id": "p1", "code": "print(1)"},
          {"type": "program_output", "id": "p1", "output": "1"}]


def body(items: list[Any]) -> dict[str, Any]:
    return {"model": "m", "stream": True, "store": False, "input": items}


def test_an_item_round_trips_and_only_the_proxys_own_is_read() -> None:
    item = ci.make_item("FACT-01: kept", "user")
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert ci.proxy_summary(item) == ("user", "FACT-01: kept")
    assert ci.proxy_summary(OPAQUE[0]) is None
    version, payload, _ = item["encrypted_content"].split(".")
    assert ci.proxy_summary({**item, "encrypted_content": f"{version}.{payload}.{'0' * 16}"}) \
        is None
    assert ci.proxy_summary({**item, "encrypted_content": "cpx1.!!.x"}) is None


def test_expand_replaces_the_proxys_items_with_the_summary_message() -> None:
    mine = ci.make_item("the summary")
    got = ci.expand(body([mine, OPAQUE[0], {"role": "user", "content": "go"}]),
                    format_summary)
    assert got is not None
    assert got["input"][0] == {"type": "message", "role": "user",
                               "content": format_summary("the summary")}
    assert got["input"][0]["content"].startswith(SUMMARY_OPEN)
    assert got["input"][1:] == [OPAQUE[0], {"role": "user", "content": "go"}]
    assert ci.expand(body([OPAQUE[0]]), format_summary) is None


def test_the_trigger_and_a_refusal_of_it_are_recognised() -> None:
    assert ci.ends_in_trigger(body([{"role": "user", "content": "x"}, {"type": ci.TRIGGER}]))
    assert not ci.ends_in_trigger(body([{"type": ci.TRIGGER}, {"role": "user", "content": "x"}]))
    assert not ci.ends_in_trigger({"input": "text"})
    refusal = orjson.dumps({"error": {"message": "Invalid value: 'compaction_trigger'."}})
    assert ci.refuses_trigger(400, refusal)
    assert not ci.refuses_trigger(400, b'{"error": {"message": "other"}}')
    assert not ci.refuses_trigger(500, refusal)


def test_the_answer_events_hold_exactly_one_item() -> None:
    item = ci.make_item("s")
    events = ci.answer_events(body([{"type": ci.TRIGGER}]), item)
    assert [e["type"] for e in events] == ["response.created", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    assert events[-1]["response"]["output"] == [item]
    assert events[0]["response"]["id"] == events[-1]["response"]["id"]
    assert ci.sse(events).count(b"\n\n") == 4


def test_the_adapter_keeps_context_items_verbatim_in_place_and_the_trigger_last() -> None:
    items: list[Any] = [{"role": "user", "content": "task"}, *OPAQUE,
                        {"type": "function_call", "call_id": "c", "name": "f",
                         "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c", "output": "x" * 99},
                        {"type": ci.TRIGGER}]
    adapted = read(body(items))
    assert adapted.messages[-1]["role"] == "developer"  # opaque: never masked or summarized
    assert adapted.encode(adapted.messages)["input"] == items
    # A summary standing for the first messages: every opaque item and the trigger stay.
    summary = {"role": "user", "content": format_summary("s")}
    rewritten = [summary, *adapted.messages[1:]]
    sent = adapted.encode(rewritten)["input"]
    assert sent[1:] == items[1:] and sent[-1] == {"type": ci.TRIGGER}
    # A masked output keeps its place; the trigger stays last.
    masked = [{**m, "content": "[cleared]"} if m.get("role") == "tool" else m
              for m in adapted.messages]
    out = adapted.encode(masked)["input"]
    assert out[-1] == {"type": ci.TRIGGER} and out[1:6] == OPAQUE
