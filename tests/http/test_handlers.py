"""The handlers in process: the real app (``proxy.app.create_app``) driven by pytest-aiohttp's
``aiohttp_client``, against an in-process fake upstream on the same event loop.

Chat completions whole and streamed (what the upstream received, the ``X-Context-*`` headers),
every kind of bad input answered in OpenAI's error shape with its status and ``param`` and
leaving no stored state behind, missing and invalid keys, and the operator endpoints.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy.app import create_app
from proxy.context.identity import conversation_key
from proxy.policy.platform import PlatformConfig
from proxy.settings import load_settings
from proxy.state import STATE
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.scrape import metric

MODEL = "handler-model"
WINDOW = 32_768
MAX_BODY = 100_000
UPSTREAM_KEY = "sk-upstream-handlers-0123456789"
CHAT = "/v1/chat/completions"
GOOD: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}]}
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream(models={MODEL: WINDOW})
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def app(fake: FakeUpstream, tmp_path: Path, database_url: str | None) -> web.Application:
    settings = load_settings(
        {"CONTEXT_PROXY_DB": str(tmp_path / "proxy.db"),
         "CONTEXT_PROXY_DATABASE_URL": database_url or "",
         "CONTEXT_PROXY_UPSTREAM_URL": fake.base_url,
         "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY},
        # the embedded platform defaults, and no folder to watch: not the repository's policies/
        platform=PlatformConfig(), policies_dir=None, max_body_bytes=MAX_BODY)
    return create_app(settings)


@pytest.fixture
async def proxy(aiohttp_client: Callable[[web.Application], Awaitable[Client]],
                app: web.Application) -> Client:
    return await aiohttp_client(app)


@pytest.fixture
def auth(proxy: Client, app: web.Application) -> dict[str, str]:
    """The headers of a fresh key of organization ``acme`` (the store exists once started)."""
    _, key = app[STATE].store.keys.create("acme")
    return {"Authorization": f"Bearer {key}"}


def conversations(app: web.Application) -> int:
    return int(app[STATE].store.read_one("SELECT count(*) FROM conversations")[0])


async def openai_error(resp: Any, status: int) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped error answer with ``status``."""
    text = await resp.text()
    assert resp.status == status, text
    assert resp.content_type == "application/json"
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in err["message"]
    return err  # type: ignore[no-any-return]


# --- chat completions ----------------------------------------------------------------------


async def test_chat_completion_is_relayed_with_context_headers(
        proxy: Client, app: web.Application, fake: FakeUpstream, auth: dict[str, str]) -> None:
    raw = json.dumps(GOOD, separators=(",", ":")).encode()
    resp = await proxy.post(CHAT, data=raw, headers={**auth, "X-Conversation-Id": "h-1",
                                                     "Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "ack: hi there"}
    assert body["usage"]["prompt_tokens"] > 0
    # what the upstream got: the client's exact bytes, under the upstream's key
    sent = fake.requests[-1]
    assert (sent.method, sent.path, sent.body) == ("POST", CHAT, raw)
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert fake.chat_requests() == [GOOD]
    headers = resp.headers
    assert headers["X-Conversation-Id"] == "h-1"
    assert headers["X-Context-Compaction"] == "none"
    assert headers["X-Context-Window"] == str(WINDOW)  # from the upstream's /v1/models
    assert headers["X-Context-Masked"] == "0"
    assert int(headers["X-Context-Tokens-Before"]) == int(headers["X-Context-Tokens-After"]) > 0
    assert "X-Context-Divider-Id" not in headers and "X-Context-Retried" not in headers
    assert app[STATE].context.records.exists(conversation_key("acme", "h-1"))
    assert conversations(app) == 1


async def test_streamed_chat_completion_is_relayed_as_events(
        proxy: Client, app: web.Application, fake: FakeUpstream, auth: dict[str, str]) -> None:
    body = dict(GOOD, stream=True, stream_options={"include_usage": True})
    resp = await proxy.post(CHAT, json=body, headers=auth)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["X-Context-Compaction"] == "none"
    assert resp.headers["X-Conversation-Id"].startswith("fp-")  # no header: a fingerprint
    assert resp.headers["X-Context-Window"] == str(WINDOW)
    text = await resp.text()
    assert not text.startswith(":")  # no compaction, so no comment line first
    events = [line.removeprefix("data: ") for line in text.splitlines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or ""
                      for c in chunks if c["choices"])
    assert content == "ack: hi there"
    assert chunks[-1]["usage"]["prompt_tokens"] > 0
    assert fake.chat_requests() == [body]
    assert conversations(app) == 1


# --- bad input: OpenAI's error shape, the right status and param, nothing stored -------------


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


BAD_REQUESTS = [
    pytest.param(b"{not json", None, "invalid_json", id="invalid-json"),
    pytest.param(b"", None, "invalid_json", id="empty-body"),
    pytest.param(b"[1, 2]", None, "invalid_json", id="array-body"),
    pytest.param(b'"a string"', None, "invalid_json", id="string-body"),
    pytest.param(_json({"messages": GOOD["messages"]}), "model", None, id="missing-model"),
    pytest.param(_json({"model": "", "messages": GOOD["messages"]}), "model", None,
                 id="empty-model"),
    pytest.param(_json({"model": MODEL}), "messages", None, id="missing-messages"),
    pytest.param(_json({"model": MODEL, "messages": "hi"}), "messages", None,
                 id="messages-a-string"),
    pytest.param(_json({"model": MODEL, "messages": {"role": "user"}}), "messages", None,
                 id="messages-an-object"),
    pytest.param(_json({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}),
                 "messages[0].role", None, id="bad-role"),
    pytest.param(_json({"model": MODEL, "messages": [
        {"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}),
        "messages[1].role", None, id="bad-role-second"),
    pytest.param(_json({"model": MODEL, "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None,
                                           "tool_calls": [CALL]},
        {"role": "tool", "content": "out"}]}),
        "messages[2].tool_call_id", None, id="tool-without-tool_call_id"),
    pytest.param(_json({"model": MODEL, "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None,
                                           "tool_calls": [CALL]},
        {"role": "user", "content": "no result in between"}]}),
        "messages", "invalid_message_sequence", id="unanswered-tool-call"),
    pytest.param(_json({"model": MODEL, "messages": [
        {"role": "tool", "tool_call_id": "call_1", "content": "orphan"}]}),
        "messages", "invalid_message_sequence", id="orphan-tool-result"),
    pytest.param(_json(dict(GOOD, stream="yes")), "stream", None, id="stream-not-bool"),
    pytest.param(_json(dict(GOOD, stream=1)), "stream", None, id="stream-an-integer"),
    pytest.param(b'{"model": "handler-model", "messages": [{"role": "user", "content": '
                 b'"\\ud800"}]}', None, "invalid_json", id="lone-surrogate"),
    pytest.param(b'{"model": "handler-model", "messages": [{"role": "user", "content": "x"}],'
                 b' "seed": ' + b"7" * 5_000 + b"}", None, "invalid_json",
                 id="5000-digit-integer"),
    pytest.param(b'{"model": "handler-model", "messages": [{"role": "user", "content": '
                 + b"[" * 20_000 + b"]" * 20_000 + b"}]}", None, "invalid_json",
                 id="nested-20000-deep"),
    pytest.param(b"\xff\xfe{}", None, "invalid_json", id="not-utf8"),
]


@pytest.mark.parametrize("raw, param, code", BAD_REQUESTS)
async def test_bad_chat_request_is_400_and_stores_nothing(
        proxy: Client, app: web.Application, fake: FakeUpstream, auth: dict[str, str],
        raw: bytes, param: str | None, code: str | None) -> None:
    assert len(raw) < MAX_BODY  # refused for its content, not its size
    resp = await proxy.post(CHAT, data=raw, headers={**auth, "X-Conversation-Id": "bad",
                                                     "Content-Type": "application/json"})
    err = await openai_error(resp, 400)
    assert err["type"] == "invalid_request_error"
    assert (err["param"], err["code"]) == (param, code)
    assert fake.requests == []  # the upstream was never asked, not even for /v1/models
    assert not app[STATE].context.records.exists(conversation_key("acme", "bad"))
    assert conversations(app) == 0


async def test_body_over_the_limit_is_413(proxy: Client, app: web.Application,
                                          fake: FakeUpstream, auth: dict[str, str]) -> None:
    big = _json(dict(GOOD, messages=[{"role": "user", "content": "x" * (2 * MAX_BODY)}]))
    resp = await proxy.post(CHAT, data=big, headers={**auth, "X-Conversation-Id": "big",
                                                     "Content-Type": "application/json"})
    err = await openai_error(resp, 413)
    assert err["code"] == "request_too_large"
    assert fake.requests == []
    assert conversations(app) == 0


async def test_bad_conversation_id_header_is_400(proxy: Client, app: web.Application,
                                                 fake: FakeUpstream,
                                                 auth: dict[str, str]) -> None:
    resp = await proxy.post(CHAT, json=GOOD, headers={**auth, "X-Conversation-Id": "x" * 300})
    assert (await openai_error(resp, 400))["param"] == "X-Conversation-Id"
    assert fake.chat_requests() == []
    assert conversations(app) == 0


@pytest.mark.parametrize("authorization, code", [
    (None, "missing_api_key"), ("Bearer ", "missing_api_key"), ("Basic abc", "missing_api_key"),
    ("Bearer cp-not-a-key", "invalid_api_key"), (f"Bearer {UPSTREAM_KEY}", "invalid_api_key"),
])
async def test_missing_or_invalid_key_is_401(proxy: Client, app: web.Application,
                                             fake: FakeUpstream, authorization: str | None,
                                             code: str) -> None:
    headers = {"X-Conversation-Id": "anon"}
    if authorization is not None:
        headers["Authorization"] = authorization
    for path, body in ((CHAT, GOOD), ("/v1/models", None), ("/v1/conversations/anon/dividers",
                                                             None)):
        resp = await (proxy.post(path, json=body, headers=headers) if body is not None
                      else proxy.get(path, headers=headers))
        err = await openai_error(resp, 401)
        assert (err["type"], err["code"]) == ("invalid_request_error", code)
    assert fake.requests == []
    assert conversations(app) == 0


async def test_revoked_key_is_401_on_the_next_request(proxy: Client, app: web.Application,
                                                      fake: FakeUpstream) -> None:
    store = app[STATE].store
    record, key = store.keys.create("acme")
    headers = {"Authorization": f"Bearer {key}"}
    assert (await proxy.post(CHAT, json=GOOD, headers=headers)).status == 200
    assert store.keys.revoke(record.id)
    err = await openai_error(await proxy.post(CHAT, json=GOOD, headers=headers), 401)
    assert err["code"] == "invalid_api_key"
    assert len(fake.chat_requests()) == 1


# --- operator endpoints --------------------------------------------------------------------


async def test_health_and_readiness(proxy: Client) -> None:
    resp = await proxy.get("/healthz")
    assert (resp.status, await resp.json()) == (200, {"status": "ok"})
    resp = await proxy.get("/readyz")
    assert (resp.status, await resp.json()) == (200, {"status": "ready"})
    err = await openai_error(await proxy.post("/healthz", data=b"{}"), 405)
    assert err["code"] == "method_not_allowed"


async def test_metrics_count_requests_by_route_and_status(proxy: Client,
                                                          auth: dict[str, str]) -> None:
    assert (await proxy.post(CHAT, json=GOOD, headers=auth)).status == 200
    assert (await proxy.post(CHAT, data=b"{oops", headers=auth)).status == 400
    assert (await proxy.post(CHAT, json=GOOD)).status == 401
    resp = await proxy.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = await resp.text()
    assert metric(text, "context_proxy_requests_total", route="chat", status_class="2xx") == 1
    assert metric(text, "context_proxy_requests_total", route="chat", status_class="4xx") == 2
    assert UPSTREAM_KEY not in await resp.text()
