"""The Responses API's WebSocket mode (``GET /v1/responses`` with an upgrade) through the real
proxy: a tool session on one socket, sent the way Codex sends it (a ``generate: false`` warmup,
then ``previous_response_id`` with only the new items), reaches the upstream exactly as the same
conversation sent over HTTP does, masked and compacted alike; errors are error events; the
socket refuses a bad key before upgrading and a plain GET is still a 405."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from factories import SEED_STEPS_YAML, synchronous_policies

from proxy.testing import agent
from proxy.testing.fake.fake_apis import RESPONSES
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness

MODEL = "gpt-agent"
WINDOW = 32_768
SPEC = agent.AgentSpec(thought_words=(300, 450), facts=agent.DEMO.facts)
TOOLS = agent.RESPONSES_TOOLS
CONVERSATION = {"X-Conversation-Id": "ws-1"}


class Script:
    def __init__(self) -> None:
        self.next: dict[str, Any] = {"role": "assistant", "content": "ok"}

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.next


def start(make_harness: Callable[..., Harness], script: Script, **settings: Any) -> Harness:
    # Summaries made at the trigger, not prepared: the socket and HTTP runs compare bodies,
    # and a preparation's timing would decide which turn applies it.
    # And the seed's masking steps: the session shows both stages over the socket.
    env = synchronous_policies(Path(tempfile.mkdtemp()) / "policies",
                               f"defaults:\n  {SEED_STEPS_YAML}\n")
    return make_harness(fake=FakeUpstream(models={MODEL: WINDOW}, responder=script.respond,
                                          stream_chunks=3), env=env, **settings)


def ws_url(h: Harness) -> str:
    return h.base_url + "/responses"


@asynccontextmanager
async def socket(h: Harness, key: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with aiohttp.ClientSession() as s, s.ws_connect(
            ws_url(h), headers={"Authorization": f"Bearer {key}",
                                "OpenAI-Beta": "responses_websockets=2026-02-06",
                                **CONVERSATION}) as ws:
        yield ws


async def until_end(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    """The events of one request, up to its end (``response.completed`` or an error)."""
    events: list[dict[str, Any]] = []
    while True:
        msg = await ws.receive(timeout=30)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        events.append(json.loads(msg.data))
        if events[-1]["type"] in ("response.completed", "response.failed", "error"):
            return events


def small(items: Any) -> dict[str, Any]:
    return {"model": MODEL, "stream": True, "input": items}


def request(items: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "instructions": agent.SYSTEM, "tools": TOOLS, "store": False,
            "stream": True, "input": items, **extra}


async def play_socket(h: Harness, key: str, script: Script, turns: int
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A tool session over one socket, Codex's way; (each turn's full request as it would go
    over HTTP, each turn's context event)."""
    full, contexts = [], []
    items: list[Any] = [{"role": "user", "content": agent.TASK}]
    async with socket(h, key) as ws:
        await ws.send_json({"type": "response.create", "generate": False, **request([])})
        warm = await until_end(ws)
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        previous, baseline = warm[-1]["response"]["id"], []
        for assistant, results in agent.turns(SPEC, turns):
            script.next = assistant
            await ws.send_json({"type": "response.create", "previous_response_id": previous,
                                "client_metadata": {"turn": str(len(full))},
                                **request(items[len(baseline):])})
            events = await until_end(ws)
            assert events[0]["type"] == "context_proxy.context", events[0]
            assert events[1]["type"] == "response.created"
            assert events[-1]["type"] == "response.completed", events[-1]
            contexts.append(events[0]["headers"])
            full.append(request(list(items), client_metadata={"turn": str(len(full))}))
            output = [e["item"] for e in events if e["type"] == "response.output_item.done"]
            previous, baseline = events[-1]["response"]["id"], items + output
            items = [*baseline, *({"type": "function_call_output", "call_id": r["tool_call_id"],
                                   "output": r["content"]} for r in results)]
    return full, contexts


async def play_http(h: Harness, key: str, script: Script, bodies: list[dict[str, Any]],
                    answers: list[dict[str, Any]]) -> None:
    async with aiohttp.ClientSession() as s:
        for body, assistant in zip(bodies, answers, strict=True):
            script.next = assistant
            async with s.post(h.base_url + "/responses", json=body, headers={
                    "Authorization": f"Bearer {key}", **CONVERSATION}) as resp:
                assert resp.status == 200
                await resp.read()


def upstream_bodies(h: Harness) -> list[dict[str, Any]]:
    return [r.json for r in h.fake.requests if r.path == RESPONSES]


def test_a_tool_session_on_one_socket_reaches_the_upstream_as_over_http(
        make_harness: Callable[..., Harness]) -> None:
    turns = 45
    ws_script, http_script = Script(), Script()
    over_ws, over_http = start(make_harness, ws_script), start(make_harness, http_script)
    full, contexts = asyncio.run(play_socket(over_ws, over_ws.create_key("acme"), ws_script,
                                             turns))
    answers = [a for a, _ in agent.turns(SPEC, turns)]
    # Another organization: the two harnesses share a store, and a conversation of one
    # organization is never another's (no compaction reused across them).
    asyncio.run(play_http(over_http, over_http.create_key("other"), http_script, full, answers))
    sent = upstream_bodies(over_ws)
    assert sent == upstream_bodies(over_http)
    assert all("previous_response_id" not in b and "type" not in b and "generate" not in b
               for b in sent)
    masked = [int(c["X-Context-Masked"]) for c in contexts]
    assert max(masked) > 0 and contexts[-1]["X-Conversation-Id"].endswith("ws-1")
    compacted = [c for c in contexts if c["X-Context-Compaction"] == "auto"]
    assert compacted and all(c["X-Context-Divider-Id"] for c in compacted)
    assert len(sent) > turns  # the summary calls, alike over both
    assert sent[-1]["client_metadata"] == {"turn": str(turns - 1)}
    text = over_ws.call(_metrics(over_ws))
    assert f'context_proxy_requests_total{{route="responses_ws",status_class="2xx"}} ' \
           f'{turns + 1}.0' in text


async def _metrics(h: Harness) -> str:
    async with aiohttp.ClientSession() as s, s.get(h.base_url[:-3] + "/metrics") as resp:
        return await resp.text()


async def _errors(h: Harness, key: str) -> list[dict[str, Any]]:
    got = []
    async with socket(h, key) as ws:
        for message in ("{not json", "[1, 2]", json.dumps({"type": "session.update"}),
                        json.dumps({"type": "response.create", "input": "hi"}),
                        json.dumps({"type": "response.create", **small("x" * 5000)})):
            await ws.send_str(message)
            got += await until_end(ws)
        await ws.send_bytes(b"\x00")
        got += await until_end(ws)
        h.fake.faults.append(Fault(status=429, path=RESPONSES, headers={"Retry-After": "7"}))
        await ws.send_json({"type": "response.create", **small("hello")})
        got += await until_end(ws)
        h.fake.faults.append(Fault(status=200, mode="reset", path=RESPONSES))
        await ws.send_json({"type": "response.create", **small("hello")})
        got += await until_end(ws)
        await ws.send_json({"type": "response.processed", "response_id": "resp_fake"})
        await ws.send_json({"type": "response.create", **small("still there?")})
        got += await until_end(ws)  # the acknowledgement got no answer of its own
    return got


def test_bad_messages_and_upstream_errors_are_error_events_on_a_socket_that_stays(
        make_harness: Callable[..., Harness]) -> None:
    script = Script()
    h = start(make_harness, script, max_body_bytes=4096)
    got = asyncio.run(_errors(h, h.create_key("acme")))
    errors = [e for e in got if e["type"] == "error"]
    assert [(e["status"], e["error"].get("code") or e["error"].get("param")) for e in errors] == [
        (400, "invalid_json"), (400, "type"), (400, "type"), (400, "model"),
        (413, "request_too_large"), (400, None), (429, None), (502, "upstream_broken")]
    assert errors[-2]["headers"]["Retry-After"] == "7"
    assert "X-Context-Tokens-Before" in errors[-2]["headers"]
    assert all(set(e["error"]) >= {"message", "type"} for e in errors)
    assert got[-1]["type"] == "response.completed"


async def _two_at_once(h: Harness, key: str) -> list[dict[str, Any]]:
    async with socket(h, key) as ws:
        h.fake.faults.append(Fault(status=200, delay_s=0.5, path=RESPONSES))
        await ws.send_json({"type": "response.create", **small("first")})
        await ws.send_json({"type": "response.create", **small("second")})
        first = await until_end(ws)
        return first + await until_end(ws)


def test_a_second_request_while_one_is_in_flight_is_refused(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, Script())
    got = asyncio.run(_two_at_once(h, h.create_key("acme")))
    assert got[0]["type"] == "error" and got[0]["error"]["code"] == "response_in_progress"
    assert got[-1]["type"] == "response.completed"
    assert [b["input"] for b in upstream_bodies(h)] == ["first"]


async def _foreign_previous(h: Harness, key: str) -> list[dict[str, Any]]:
    async with socket(h, key) as ws:
        await ws.send_json({"type": "response.create", "previous_response_id": "resp_elsewhere",
                            **small("and then?")})
        return await until_end(ws)


def test_a_previous_response_id_of_another_socket_is_relayed_as_it_came(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, Script())
    events = asyncio.run(_foreign_previous(h, h.create_key("acme")))
    assert events[0]["headers"]["X-Context-History"] == "upstream"
    assert events[-1]["type"] == "response.completed"
    sent = upstream_bodies(h)[-1]
    assert sent["previous_response_id"] == "resp_elsewhere" and sent["input"] == "and then?"


UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


async def _plain_gets(h: Harness, key: str) -> list[tuple[int, Any, str]]:
    out = []
    async with aiohttp.ClientSession() as s:
        for headers in ({"Authorization": f"Bearer {key}"},
                        {"Authorization": "Bearer sk-wrong", **UPGRADE}):
            async with s.get(ws_url(h), headers=headers) as resp:
                out.append((resp.status, await resp.json(), resp.headers.get("Allow", "")))
    return out


def test_a_plain_get_is_405_and_a_wrong_key_refuses_the_upgrade_with_401(
        make_harness: Callable[..., Harness]) -> None:
    h = start(make_harness, Script())
    (plain, plain_body, allow), (wrong, wrong_body, _) = asyncio.run(
        _plain_gets(h, h.create_key("acme")))
    assert (plain, allow) == (405, "POST") and plain_body["error"]["type"]
    assert wrong == 401 and set(wrong_body["error"]) == {"message", "type", "param", "code"}
    assert not upstream_bodies(h)


@pytest.mark.parametrize("size", [1, 3])
def test_an_oversized_message_is_refused(make_harness: Callable[..., Harness], size: int
                                         ) -> None:
    """Over the body limit: an error event, the socket kept; over twice that: closed (1009)."""
    h = start(make_harness, Script(), max_body_bytes=4096)

    async def send() -> tuple[Any, ...]:
        async with socket(h, h.create_key("acme")) as ws:
            await ws.send_json({"type": "response.create", **small("y" * 4100 * size)})
            msg = await ws.receive(timeout=10)
            return msg.type, msg.data, ws.close_code

    kind, data, code = asyncio.run(send())
    if size == 1:
        assert kind == aiohttp.WSMsgType.TEXT and json.loads(data)["status"] == 413
    else:
        assert kind in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and code == 1009


@pytest.mark.usefixtures("database_url")
def test_an_idle_socket_is_closed_going_away_when_the_server_stops(tmp_path: Path) -> None:
    h = Harness(tmp_path, fake=FakeUpstream(models={MODEL: WINDOW})).start()

    async def stop_while_open() -> int | None:
        async with socket(h, h.create_key("acme")) as ws:
            await ws.send_json({"type": "response.create", **small("hello")})
            assert (await until_end(ws))[-1]["type"] == "response.completed"
            stopping = asyncio.create_task(asyncio.to_thread(h.stop))
            msg = await ws.receive(timeout=10)
            await stopping
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            return ws.close_code

    assert asyncio.run(stop_while_open()) == 1001


def test_with_the_mode_off_the_upgrade_is_426(make_harness: Callable[..., Harness]) -> None:
    """426 is the refusal on which Codex switches to HTTP at once (it retries any other)."""
    h = start(make_harness, Script(), responses_websocket=False)

    async def get() -> tuple[int, Any]:
        async with aiohttp.ClientSession() as s, s.get(ws_url(h), headers={
                "Authorization": f"Bearer {h.create_key('acme')}", **UPGRADE}) as resp:
            return resp.status, await resp.json()

    status, body = asyncio.run(get())
    assert status == 426 and body["error"]["code"] == "websocket_mode_disabled"
