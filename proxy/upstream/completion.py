"""The proxy's own chat completions (summary and rerank calls), through the shared session.

The request body is exactly the messages and tools given (no client library rewrites them), so
a summary call can share its prompt prefix, byte for byte, with the conversation's last request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.upstream.client import Upstream
from proxy.upstream.relay import read_body

PATH = "/chat/completions"


class CompletionFailed(Exception):
    """No answer came back: an error status, or a body that is not a chat completion."""


@dataclass(frozen=True)
class Completion:
    content: str | None
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    total_tokens: int
    written_tokens: int = 0  # stored in the prompt cache by this call
    completion_tokens: int = 0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_completion(raw: bytes) -> Completion:
    """The parts of a chat completion body the proxy uses; raises ``CompletionFailed``."""
    try:
        data = orjson.loads(raw)
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise CompletionFailed("the upstream answer is not a chat completion") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    written = details.get("cache_write_tokens") if isinstance(details, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return Completion(content if isinstance(content, str) else None,
                      reason if isinstance(reason, str) else None,
                      _int(usage.get("prompt_tokens")), _int(cached),
                      _int(usage.get("total_tokens")), _int(written),
                      _int(usage.get("completion_tokens")))


async def post_whole(upstream: Upstream, path: str, headers: Mapping[str, str],
                     payload: Mapping[str, Any], route: str) -> bytes:
    """POST ``payload`` to ``path`` not streamed, and the body of its 200 answer. Raises
    ``CompletionFailed`` on another status, ``ApiError`` (502/504) when the upstream cannot be
    reached or its answer breaks off."""
    resp = await upstream.open("POST", path, headers, orjson.dumps({**payload, "stream": False}),
                               route=route)
    try:
        raw = await read_body(resp)
    finally:
        resp.release()
    if resp.status != 200:
        raise CompletionFailed(f"the upstream answered {resp.status}")
    return raw


async def complete(upstream: Upstream, api_key: str | None, payload: Mapping[str, Any],
                   extra_headers: Mapping[str, str] | None = None, route: str = "summary"
                   ) -> Completion:
    """One non-streamed chat completion. Raises ``CompletionFailed``, or ``ApiError`` (502/504)
    when the upstream cannot be reached or its answer breaks off; callers bound the call's
    time. ``route`` labels the call in the metrics (``Upstream.open``)."""
    # The shared session neither decompresses nor adds a Content-Type: ask for plain JSON.
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity",
               **(extra_headers or {})}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return parse_completion(await post_whole(upstream, PATH, headers, payload, route))
