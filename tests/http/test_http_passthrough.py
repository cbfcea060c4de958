"""Every other ``/v1/*`` route (``proxy.http.passthrough``), its handler called in process: relayed
to the upstream with the upstream key in place of the client's, the proxy's own headers left out,
the answer as it came."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from inproc import UPSTREAM_KEY, routed

from proxy.errors import ApiError
from proxy.http.passthrough import relay_any
from proxy.state import STATE
from proxy.testing.fake_upstream import FakeUpstream

App = Callable[..., Awaitable[web.Application]]


async def test_a_route_the_proxy_does_not_manage_is_relayed(make_app: App,
                                                            fake_upstream: FakeUpstream) -> None:
    app = await make_app()
    key = app[STATE].store.keys.create("acme")[1]
    answer = await relay_any(await routed(
        app, "GET", "/v1/models?limit=5",
        headers={"Authorization": f"Bearer {key}", "X-Conversation-Id": "t-1",
                 "X-Context-Compact": "true", "OpenAI-Organization": "org-1"}))
    assert answer.status == 200
    assert "m-32k" in {m["id"] for m in json.loads(answer.body)["data"]}  # type: ignore
    sent = fake_upstream.requests[-1]
    assert (sent.path, sent.query) == ("/v1/models", "limit=5")
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.headers["OpenAI-Organization"] == "org-1"
    assert "X-Conversation-Id" not in sent.headers and "X-Context-Compact" not in sent.headers
    with pytest.raises(ApiError) as info:
        await relay_any(await routed(app, "GET", "/v1/models"))
    assert info.value.status == 401
