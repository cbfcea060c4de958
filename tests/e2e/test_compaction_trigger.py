"""Codex's in-band compaction (a Responses request whose last input item is
``compaction_trigger``) through the real proxy, over HTTP with the ``openai`` SDK (streamed and
whole) and over the WebSocket mode, against a fake that serves the trigger and one that does
not (SPEC sections 2 and 11): the client gets exactly one ``compaction`` item either way; the
upstream sees the trigger last when it serves it, and never an item the proxy made."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import openai
import pytest

from proxy.apis import compaction_items as ci
from proxy.testing.agent_model import fact, fact_summarizer, facts_in
from proxy.testing.fake import fake_apis as fake_apis_module
from proxy.testing.fake import fake_compaction as fake_items
from proxy.testing.fake.fake_apis import RESPONSES
from proxy.testing.fake.faults import Fault
from proxy.testing.fake_upstream import FakeUpstream, is_summary_request
from proxy.testing.harness import Harness

MODEL = "gpt-agent"
TRIGGER = {"type": "compaction_trigger"}
FACTS = [fact(i) for i in (1, 2, 3)]


def history() -> list[dict[str, Any]]:
    """A short tool session whose outputs carry the facts a summary must keep."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user",
                                    "content": "Read the notes and list their facts."}]
    for i, line in enumerate(FACTS, 1):
        items += [{"type": "function_call", "call_id": f"c{i}", "name": "read_file",
                   "arguments": json.dumps({"path": f"notes_{i:02d}.md"})},
                  {"type": "function_call_output", "call_id": f"c{i}", "output": line}]
    return items


def start(make_harness: Callable[..., Harness], serves: bool, **settings: Any) -> Harness:
    fake = FakeUpstream(models={MODEL: 32_768}, serves_compaction_trigger=serves,
                        summarizer=fact_summarizer)
    return make_harness(fake=fake, **settings)


def client(h: Harness) -> openai.OpenAI:
    return openai.OpenAI(base_url=h.base_url, api_key=h.create_key("acme"), max_retries=0)


def ask(c: openai.OpenAI, items: list[Any], stream: bool) -> dict[str, Any]:
    """One request through the SDK; the final response object."""
    kwargs: dict[str, Any] = dict(model=MODEL, input=items, store=False,
                                  extra_headers={"X-Conversation-Id": "trigger-1"})
    if not stream:
        return dict(c.responses.with_raw_response.create(**kwargs).http_response.json())
    with c.responses.with_streaming_response.create(stream=True, **kwargs) as raw:
        events = [json.loads(line[5:]) for line in raw.iter_lines() if line.startswith("data:")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == events[-1]["response"]["output"]
    return dict(events[-1]["response"])


def upstream_inputs(h: Harness) -> list[list[Any]]:
    """The ``input`` of every Responses request the upstream got, summary calls aside."""
    return [r.json["input"] for r in h.fake.requests if r.path == RESPONSES
            and not is_summary_request(fake_apis_module.as_chat(RESPONSES, r.json))]


def proxy_items_upstream(h: Harness) -> list[Any]:
    return [i for r in h.fake.requests if r.path == RESPONSES for i in r.json["input"]
            if ci.proxy_summary(i) is not None]


def the_item(response: dict[str, Any]) -> dict[str, Any]:
    output = response["output"]
    assert [i["type"] for i in output] == ["compaction"], output
    return dict(output[0])


@pytest.mark.parametrize("stream", [False, True])
def test_a_serving_upstream_gets_the_trigger_last_and_answers_it(
        make_harness: Callable[..., Harness], stream: bool) -> None:
    h = start(make_harness, serves=True)
    c = client(h)
    item = the_item(ask(c, [*history(), TRIGGER], stream))
    assert fake_items.issued_summary(item) is not None  # the upstream's own item, as it came
    assert upstream_inputs(h)[-1][-1] == TRIGGER
    ask(c, [item, {"type": "message", "role": "user", "content": "go on"}], stream)
    assert upstream_inputs(h)[-1][0] == item  # relayed verbatim, in place
    assert not h.fake.refusals()


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_answers_the_trigger_an_upstream_refuses_and_expands_its_item(
        make_harness: Callable[..., Harness], stream: bool) -> None:
    h = start(make_harness, serves=False)
    c = client(h)
    item = the_item(ask(c, [*history(), TRIGGER], stream))
    found = ci.proxy_summary(item)
    assert found is not None and facts_in([found[1]]) == FACTS
    refused = [r for r in h.fake.requests if r.refused]
    assert len(refused) == 1 and "compaction_trigger" in (refused[0].refused or "")
    # Learned: the next trigger is answered without asking the upstream first.
    sent = len(upstream_inputs(h))
    the_item(ask(c, [*history(), TRIGGER], stream))
    assert len(upstream_inputs(h)) == sent
    ask(c, [item, {"type": "message", "role": "user", "content": "go on"}], stream)
    first = upstream_inputs(h)[-1][0]
    assert first["type"] == "message" and facts_in([first["content"]]) == FACTS
    assert proxy_items_upstream(h) == []
    assert len(h.fake.refusals()) == 1


def test_configured_off_the_trigger_never_reaches_the_upstream(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, serves=False, serves_compaction_trigger="false")
    the_item(ask(client(h), [*history(), TRIGGER], stream=True))
    assert not any(i == TRIGGER for items in upstream_inputs(h) for i in items)
    assert h.fake.refusals() == []


def test_a_failed_summary_is_a_clean_502(make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, serves=False, serves_compaction_trigger="false")
    h.fake.faults.append(Fault(status=500, path=RESPONSES, times=-1))
    with pytest.raises(openai.APIStatusError) as got:
        ask(client(h), [*history(), TRIGGER], stream=True)
    assert got.value.status_code == 502
    body = got.value.response.json()
    assert body["error"]["code"] == "compaction_summary_failed"
    assert body["error"]["type"] == "upstream_error"


async def over_socket(h: Harness, key: str) -> tuple[list[Any], list[Any]]:
    """The trigger, then a follow-up carrying its item, over one socket; each one's events."""
    async with aiohttp.ClientSession() as s, s.ws_connect(
            h.base_url + "/responses", headers={"Authorization": f"Bearer {key}"}) as ws:
        got = []
        for items in ([*history(), TRIGGER], None):
            if items is None:
                item = [e["item"] for e in got[0] if e["type"] == "response.output_item.done"]
                items = [*item, {"type": "message", "role": "user", "content": "go on"}]
            await ws.send_json({"type": "response.create", "model": MODEL, "store": False,
                                "input": items})
            events: list[Any] = []
            while not events or events[-1]["type"] not in ("response.completed", "error"):
                events.append(json.loads((await ws.receive(timeout=30)).data))
            got.append(events)
        return got[0], got[1]


@pytest.mark.parametrize("serves", [True, False])
def test_the_websocket_mode_gets_exactly_one_compaction_item(
        make_harness: Callable[..., Harness], serves: bool) -> None:
    h = start(make_harness, serves=serves)
    first, second = asyncio.run(over_socket(h, h.create_key("acme")))
    item = the_item(first[-1]["response"])
    assert [e["item"] for e in first if e["type"] == "response.output_item.done"] == [item]
    assert second[-1]["type"] == "response.completed", second[-1]
    mine = ci.proxy_summary(item)
    assert (mine is None) == serves
    assert proxy_items_upstream(h) == []
    if serves:
        assert upstream_inputs(h)[0][-1] == TRIGGER and upstream_inputs(h)[-1][0] == item
    else:
        assert facts_in([upstream_inputs(h)[-1][0]["content"]]) == FACTS


def test_the_providers_context_fields_in_an_answer_reach_the_client_unchanged(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, serves=True)
    extra = {"input_transformations": [{"type": "dropped_reasoning", "item_ids": ["rs_1"]}],
             "context_management": {"applied_edits": [{"type": "clear", "cleared": 2}]}}
    answer = {"id": "resp_x", "object": "response", "status": "completed", "model": MODEL,
              "output": [{"type": "compaction", "id": "cmp_x", "encrypted_content": "up"}],
              "usage": {"input_tokens": 5, "output_tokens": 1}, **extra}
    h.fake.faults.append(Fault(status=200, path=RESPONSES, body=answer))
    got = ask(client(h), [*history(), TRIGGER], stream=False)
    assert {k: got[k] for k in extra} == extra and got["output"] == answer["output"]


async def one_on_socket(h: Harness, items: list[Any]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.ws_connect(
            h.base_url + "/responses",
            headers={"Authorization": f"Bearer {h.create_key('acme')}"}) as ws:
        await ws.send_json({"type": "response.create", "model": MODEL, "input": items})
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads((await ws.receive(timeout=30)).data))
        return events


def test_a_failed_summary_on_the_socket_is_an_error_event_and_no_item(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, serves=False, serves_compaction_trigger="false")
    h.fake.faults.append(Fault(status=500, path=RESPONSES, times=-1))
    events = asyncio.run(one_on_socket(h, [*history(), TRIGGER]))
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["status"] == 502
    assert events[0]["error"]["code"] == "compaction_summary_failed"
