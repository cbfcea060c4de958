"""The request headers the proxy consumes (``X-Conversation-Id``, any ``X-Context-*``) never
reach the upstream, on the three managed APIs, streamed or not, and on the relayed routes;
the platform may opt in to forward ``X-Conversation-Id`` (SPEC section 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anthropic
import openai
import pytest

from proxy.testing.fake_upstream import Recorded
from proxy.testing.harness import Harness

SENT = {"X-Conversation-Id": "ticket-4711-alice", "X-Context-Trace": "on",
        "X-Context-Anything": "team-secret", "X-Other-Header": "kept"}
CHAT = [{"role": "user", "content": "Hello"}]


def play_all(h: Harness, key: str) -> None:
    """One request of each managed API, whole and streamed, and relayed routes of both
    upstreams, every one carrying ``SENT``."""
    with openai.OpenAI(base_url=h.base_url, api_key=key, max_retries=0,
                       default_headers=SENT) as oa:
        oa.chat.completions.create(model="gpt-4o", messages=CHAT)  # type: ignore[arg-type]
        for _ in oa.chat.completions.create(model="gpt-4o", messages=CHAT,  # type: ignore
                                             stream=True):
            pass
        oa.responses.create(model="gpt-4o", input="Hello")
        for _ in oa.responses.create(model="gpt-4o", input="Hello", stream=True):
            pass
        oa.models.list()
    with anthropic.Anthropic(base_url=h.base_url.removesuffix("/v1"), api_key=key,
                             max_retries=0, default_headers=SENT) as an:
        an.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=CHAT)  # type: ignore
        with an.messages.stream(model="claude-sonnet-4-5", max_tokens=64,
                                messages=CHAT) as stream:  # type: ignore[arg-type]
            stream.until_done()


def received(h: Harness) -> dict[str, dict[str, str]]:
    """Each upstream path the fake answered, with the headers (lower-cased) it received."""
    return {r.path: {k.lower(): v for k, v in r.headers.items()} for r in h.fake.requests}


def from_client(h: Harness) -> list[Recorded]:
    """The upstream requests relaying a client's (they carry its other headers; the proxy's own
    window look-up does not)."""
    return [r for r in h.fake.requests if "x-other-header" in {k.lower() for k in r.headers}]


def test_consumed_headers_stay_with_the_proxy(harness: Harness, key: str) -> None:
    play_all(harness, key)
    seen = received(harness)
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/models"} <= set(seen)
    assert len(from_client(harness)) == 7
    for r in harness.fake.requests:
        names = {k.lower() for k in r.headers}
        assert "x-conversation-id" not in names, r.path
        assert not any(n.startswith("x-context-") for n in names), (r.path, names)


@pytest.mark.parametrize("how", ["platform", "variable"])
def test_the_platform_may_forward_the_conversation_id(
        make_harness: Callable[..., Harness], tmp_path: Path, how: str) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    env = {"CONTEXT_PROXY_POLICIES": str(folder)}
    if how == "platform":
        (folder / "platform.yaml").write_text("upstream: {forward_conversation_id: true}\n")
    else:
        env["CONTEXT_PROXY_FORWARD_CONVERSATION_ID"] = "true"
    h = make_harness(env=env)
    play_all(h, h.create_key("acme"))
    relayed = from_client(h)
    assert len(relayed) == 7
    for r in relayed:
        names = {k.lower(): v for k, v in r.headers.items()}
        assert names.get("x-conversation-id") == SENT["X-Conversation-Id"], r.path
        assert not any(n.startswith("x-context-") for n in names), r.path
