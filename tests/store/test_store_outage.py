"""Serving through a store outage (SPEC section 9), on a real PostgreSQL server behind the
forwarder of ``proxy.testing.forwarder``: a silent partition (bytes dropped, no reset) and a
refused port, and connections the server drops. Recently seen keys are served from memory,
unseen keys get 503 ``store_unavailable``, ``/healthz`` never waits on the store, ``/readyz``
says it is down, and what could not be written meanwhile is in the store once it answers
again; a dropped connection is retried unseen."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from pgtest import SERVER_URL, fresh_schema, on_postgres, via_port

from proxy.context.identity import conversation_key
from proxy.store.postgres import connect
from proxy.testing import agent
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.forwarder import Forwarder
from proxy.testing.harness import Harness
from proxy.testing.scrape import metric, scrape

MSG = [{"role": "user", "content": "Hello"}]
MODEL = "agent-32k"
# A bound far above the store's deadlines and far below the 10 s the partition lasts: an answer
# within it came while the partition held (the loop did not freeze behind the store).
ANSWER_BOUND_S = 5.0


@pytest.fixture
def schema_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture
def forwarder() -> Iterator[Forwarder]:
    f = Forwarder(urlsplit(SERVER_URL).port or 5432).start()
    yield f
    f.stop()


def chat(base: str, key: str, conversation: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", timeout=ANSWER_BOUND_S,
                      headers={"Authorization": f"Bearer {key}",
                               "X-Conversation-Id": conversation},
                      json={"model": "gpt-4o", "messages": MSG})


def compact(base: str, key: str, conversation: str) -> httpx.Response:
    messages = agent.conversation(agent.AgentSpec(seed=3, output_tokens=(1800, 2200)), 4)
    return httpx.post(f"{base}/v1/conversations/{conversation}/compact", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "messages": messages, "tools": agent.TOOLS})


def wait_ready(base: str) -> None:
    for _ in range(300):  # the store's return is seen by a probe: poll, not a timing assertion
        if httpx.get(f"{base}/readyz", timeout=ANSWER_BOUND_S).status_code == 200:
            return
        time.sleep(0.1)
    raise AssertionError("/readyz never became ready after the store returned")


def rows(url: str, sql: str, params: list[Any]) -> list[Any]:
    with connect(url) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.mark.parametrize("outage", ["partition", "refused"])
def test_seen_keys_are_served_through_an_outage_and_its_writes_land_after(
        make_harness: Callable[..., Harness], schema_url: str, forwarder: Forwarder,
        outage: str) -> None:
    url = via_port(schema_url, forwarder.port)
    h = make_harness(fake=FakeUpstream(models={MODEL: 32_768}),
                     env={"CONTEXT_PROXY_DATABASE_URL": url,
                          "CONTEXT_PROXY_MANUAL_COMPACTION": "true"})
    base = h.base_url.removesuffix("/v1")
    seen, unseen = h.create_key("acme"), h.create_key("acme")
    assert chat(base, seen, "warm").status_code == 200
    assert metric(scrape(base), "context_proxy_store_up") == 1
    forwarder.partition() if outage == "partition" else forwarder.down()
    try:
        served = [chat(base, seen, f"during-{i}") for i in range(3)]
        refused = chat(base, unseen, "during-unseen")
        compacted = compact(base, seen, "during-compact")  # its summary held in memory
        health = httpx.get(f"{base}/healthz", timeout=ANSWER_BOUND_S)
        ready = httpx.get(f"{base}/readyz", timeout=ANSWER_BOUND_S)
        up_during = metric(scrape(base), "context_proxy_store_up")
    finally:
        forwarder.heal() if outage == "partition" else forwarder.up()
    assert [r.status_code for r in served] == [200, 200, 200]
    assert all(r.json()["choices"][0]["message"]["content"] for r in served)
    assert compacted.status_code == 200, compacted.text
    divider = compacted.json()["divider"]["id"]
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "store_unavailable"
    assert health.status_code == 200
    assert ready.status_code == 503
    assert up_during == 0
    wait_ready(base)
    assert chat(base, unseen, "after").status_code == 200  # no restart needed
    keys = [conversation_key("acme", f"during-{i}") for i in range(3)]
    for _ in range(100):  # the queue drains and usage flushes every 2 s: poll
        stored = rows(schema_url, "SELECT id FROM conversations WHERE id = ANY(%s)", [keys])
        usage = rows(schema_url, "SELECT conversation, requests FROM usage_totals "
                     "WHERE conversation = ANY(%s)", [keys])
        dividers = rows(schema_url, "SELECT id FROM compactions WHERE id = %s", [divider])
        if len(stored) == 3 and len(usage) == 3 and dividers:
            break
        time.sleep(0.1)
    assert sorted(r[0] for r in stored) == sorted(keys)
    assert dividers == [(divider,)]  # acknowledged during the outage, written on its return
    assert sorted((r[0], r[1]) for r in usage) == sorted((k, 1) for k in keys)
    assert metric(scrape(base), "context_proxy_store_up") == 1
    assert metric(scrape(base), "context_proxy_store_writes_queued") == 0


def test_the_suite_run_uses_the_store_it_was_asked_for(harness: Harness,
                                                       pytestconfig: pytest.Config) -> None:
    assert harness.state.store.kind == ("postgres" if on_postgres(pytestconfig) else "sqlite")


# --- a database that drops connections or goes away -----------------------------------------


def sdk_chat(h: Harness, key: str, conversation: str) -> Any:
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0) as client:
        return client.chat.completions.create(
            model="gpt-4o", messages=MSG, extra_headers={"X-Conversation-Id": conversation})


def test_dropped_connections_are_retried_unseen(
        make_harness: Callable[..., Harness], schema_url: str) -> None:
    name = "cp-" + urlsplit(schema_url).query[-8:]
    h = make_harness(env={"CONTEXT_PROXY_DATABASE_URL": f"{schema_url}&application_name={name}"})
    key = h.create_key("acme")
    sdk_chat(h, key, "before")
    with connect(SERVER_URL) as conn:
        cut = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", [name]).fetchone()[0]
    assert cut >= 1
    key2 = h.create_key("acme")  # a write on a cut connection
    assert sdk_chat(h, key2, "after").choices[0].message.content
    assert h.state.context.records.exists(conversation_key("acme", "after"))


def test_a_database_gone_away_is_a_503_store_unavailable_then_recovers(
        make_harness: Callable[..., Harness], schema_url: str, forwarder: Forwarder) -> None:
    h = make_harness(env={"CONTEXT_PROXY_DATABASE_URL": via_port(schema_url, forwarder.port)})
    key, unseen = h.create_key("acme"), h.create_key("acme")
    sdk_chat(h, key, "c1")
    forwarder.down()
    assert sdk_chat(h, key, "c2").choices[0].message.content  # seen: served from memory
    with pytest.raises(openai.InternalServerError) as info:
        sdk_chat(h, unseen, "c2")
    assert info.value.status_code == 503
    assert info.value.body == {"message": "The proxy's store is unavailable; try again shortly.",
                               "type": "server_error", "param": None,
                               "code": "store_unavailable"}
    base = h.base_url.removesuffix("/v1")
    assert httpx.get(f"{base}/readyz").status_code == 503
    forwarder.up()
    for _ in range(200):  # the pool reconnects in the background: poll, not a timing assertion
        if httpx.get(f"{base}/readyz", timeout=30).status_code == 200:
            break
        time.sleep(0.1)
    assert sdk_chat(h, key, "c3").choices[0].message.content
    assert sdk_chat(h, unseen, "c3").choices[0].message.content
