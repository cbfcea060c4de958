"""The Responses API's WebSocket mode (``proxy.http.websocket.responses_ws``) without a server: the
upgrade refused before it happens (not an upgrade: 405; a bad key: 401; the mode off: 426),
and a session's messages played on an in-memory socket in front of the fake upstream (a warmup
answered here, acknowledgements ignored, unknown or binary messages refused, one request at a
time, a response relayed event by event after the context event)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import WSMessage, WSMsgType, web
from inproc import routed

from proxy.auth import Principal
from proxy.errors import ApiError
from proxy.http.websocket.responses_ws import SESSIONS, Session, upgrade
from proxy.state import STATE

App = Callable[..., Awaitable[web.Application]]
UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


class Socket:
    """The client's side of a socket, in memory: the messages it sends (each waiting, when
    asked, until the proxy's answer so far holds ``until``), and the texts it received."""

    def __init__(self, *messages: tuple[str | bytes, str | None]) -> None:
        self.messages = messages
        self.sent: list[dict[str, Any]] = []
        self.closed = False
        self.headers: dict[str, str] = {}

    async def send_str(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def close(self, code: int = 1000, message: bytes = b"") -> bool:
        self.closed = True
        return True

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.sent]

    def __aiter__(self) -> AsyncIterator[WSMessage]:
        return self._play()

    async def _play(self) -> AsyncIterator[WSMessage]:
        for data, until in self.messages:
            kind = WSMsgType.BINARY if isinstance(data, bytes) else WSMsgType.TEXT
            yield WSMessage(kind, data, None)
            for _ in range(1000):  # the proxy answers on its own task: poll, no timing
                if until is None or until in self.kinds():
                    break
                await asyncio.sleep(0.01)


def create(**fields: Any) -> str:
    return json.dumps({"type": "response.create", "model": "gpt-x", **fields})


async def session_for(app: web.Application, socket: Socket) -> Session:
    req = await routed(app, "GET", "/v1/responses", headers=UPGRADE)
    return Session(req, app[STATE], Principal("acme", None, "key_1", "sk-up"), socket)  # type: ignore[arg-type]


async def test_the_upgrade_is_refused_before_it_happens(make_app: App) -> None:
    app = await make_app()
    with pytest.raises(web.HTTPMethodNotAllowed):
        await upgrade(await routed(app, "GET", "/v1/responses"))
    with pytest.raises(ApiError) as unknown:
        await upgrade(await routed(app, "GET", "/v1/responses",
                                   headers={**UPGRADE, "Authorization": "Bearer cp-nope"}))
    assert unknown.value.status == 401
    off = await make_app(CONTEXT_PROXY_RESPONSES_WEBSOCKET="false")
    key = off[STATE].store.keys.create("acme")[1]
    with pytest.raises(ApiError) as disabled:
        await upgrade(await routed(off, "GET", "/v1/responses",
                                   headers={**UPGRADE, "Authorization": f"Bearer {key}"}))
    assert (disabled.value.status, disabled.value.code) == (426, "websocket_mode_disabled")
    assert off[SESSIONS].open == set()


async def test_warmups_acknowledgements_and_refusals(make_app: App) -> None:
    app = await make_app()
    socket = Socket((create(generate=False, input="hi"), "response.completed"),
                    (json.dumps({"type": "response.processed"}), None),
                    (json.dumps({"type": "session.update"}), None), (b"\x00", None),
                    ("{not json", None))
    await (await session_for(app, socket)).run()
    assert socket.kinds() == ["response.created", "response.completed", "error", "error",
                              "error"]
    assert socket.sent[0]["response"]["id"] == socket.sent[1]["response"]["id"]
    assert "Unknown message type 'session.update'" in json.dumps(socket.sent[2])
    assert "Binary messages" in json.dumps(socket.sent[3])


async def test_a_response_is_relayed_event_by_event_after_its_context(make_app: App) -> None:
    app = await make_app()
    socket = Socket((create(input="hello there"), None), (create(input="again"), None))
    session = await session_for(app, socket)
    await session._on_text(create(input="hello there"), 0.0)
    await session._on_text(create(input="again"), 0.0)  # while the first is in progress
    await asyncio.gather(*session.tasks)
    kinds = socket.kinds()
    assert kinds[0] == "error" and "already in progress" in json.dumps(socket.sent[0])
    assert kinds[1] == "context_proxy.context" and kinds[-1] == "response.completed"
    assert socket.sent[1]["headers"]["X-Context-Compaction"] == "none"
    text = "".join(e.get("delta", "") for e in socket.sent if e["type"] ==
                   "response.output_text.delta")
    assert text.startswith("ack") and not session.busy
