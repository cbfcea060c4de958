"""The other APIs at the upstream: their paths and headers, the usage their answers report, and
the proxy's own (summary) calls in each.

``messages`` is Anthropic's Messages API (``x-api-key``, ``anthropic-version``), at
``CONTEXT_PROXY_ANTHROPIC_URL``; ``responses`` is OpenAI's Responses API, at the OpenAI-compatible
upstream. Usage is read with patterns, as for chat (``proxy.upstream.usage``): Anthropic's
``input_tokens`` leaves out the cache reads and writes, the Responses API's includes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.upstream.client import Upstream, request_headers
from proxy.upstream.completion import CompletionFailed, post_whole

ANTHROPIC_VERSION = "2023-06-01"
PATHS = {"messages": "/messages", "responses": "/responses"}

_INPUT = re.compile(rb'"input_tokens"\s*:\s*([0-9]+)')
_CACHE_READ = re.compile(rb'"cache_read_input_tokens"\s*:\s*([0-9]+)')
_CACHE_WRITE = re.compile(rb'"cache_creation_input_tokens"\s*:\s*([0-9]+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*([0-9]+)')


def _first(pattern: re.Pattern[bytes], data: bytes) -> int:
    found = pattern.search(data)
    return int(found.group(1)) if found else 0


def usage_of(api: str, data: bytes) -> tuple[int, int]:
    """(prompt tokens, of which cached) in an answer body or an event's data; (0, 0) when it
    reports none."""
    if api == "messages":
        read = _first(_CACHE_READ, data)
        return _first(_INPUT, data) + read + _first(_CACHE_WRITE, data), read
    return _first(_INPUT, data), _first(_CACHED, data)


class ApiUsageScanner:
    """The usage of a streamed answer, from its data lines (``EventCheck`` feeds ``line``):
    Anthropic's ``message_start`` (and ``message_delta``), the Responses API's
    ``response.completed``."""

    marker = b'"input_tokens"'  # a line without it says nothing about usage

    def __init__(self, api: str) -> None:
        self.api = api
        self.prompt_tokens = 0
        self.cached_tokens = 0

    def line(self, line: bytes) -> None:
        if line.startswith(b"data:") and self.marker in line:
            prompt, cached = usage_of(self.api, line[5:])
            if prompt >= self.prompt_tokens:
                self.prompt_tokens, self.cached_tokens = prompt, cached


API_HEADERS = ("anthropic-beta", "anthropic-version", "openai-beta")


def api_headers(incoming: Mapping[str, str]) -> dict[str, str]:
    """The headers of a client's request that say which version and betas of its API it speaks
    (repeated on the proxy's own calls for it); repeated headers joined as the HTTP list they
    are."""
    out: dict[str, str] = {}
    for name in API_HEADERS:
        values = incoming.getall(name, []) if isinstance(incoming, CIMultiDict | CIMultiDictProxy) \
            else [v for k, v in incoming.items() if k.lower() == name]
        if values:
            out[name] = ", ".join(values)
    return out


def headers_for(api: str, incoming: Mapping[str, str], key: str | None) -> CIMultiDict[str]:
    """The request headers towards the API's upstream: the client's (credentials dropped), the
    key as that API wants it; ``anthropic-version`` and ``anthropic-beta`` pass through."""
    if api != "messages":
        return request_headers(incoming, key, identity=True)
    out = request_headers(incoming, None, identity=True)
    if key:
        out["x-api-key"] = key
    out.setdefault("anthropic-version", ANTHROPIC_VERSION)
    return out


@dataclass(frozen=True)
class ApiAnswer:
    text: str | None
    tool_call: bool
    prompt_tokens: int
    cached_tokens: int


class ApiCallFailed(CompletionFailed):
    """An answer that is not the API's shape (an error status is ``CompletionFailed``)."""


def parse_answer(api: str, raw: bytes) -> ApiAnswer:
    try:
        data = orjson.loads(raw)
        if api == "messages":
            blocks = data["content"]
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            called = data.get("stop_reason") == "tool_use"
        else:
            items = data["output"]
            text = "".join(p.get("text", "") for i in items if i.get("type") == "message"
                           for p in i.get("content") or [] if p.get("type") == "output_text")
            called = any(i.get("type") == "function_call" for i in items)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ApiCallFailed(f"the upstream answer is not a {api} answer") from None
    prompt, cached = usage_of(api, raw)
    return ApiAnswer(text or None, called, prompt, cached)


async def call(upstream: Upstream, api: str, key: str | None, payload: Mapping[str, Any],
               extra_headers: Mapping[str, str] | None = None) -> ApiAnswer:
    """One non-streamed call of the API (a summary); raises ``CompletionFailed`` (its
    ``ApiCallFailed``) or ``ApiError``."""
    headers = headers_for(api, {"Content-Type": "application/json", **(extra_headers or {})},
                          key)
    return parse_answer(api, await post_whole(upstream, PATHS[api], headers, payload, "summary"))
