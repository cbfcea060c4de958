"""The managed APIs at the upstream, whatever the API (each says what it means in its
``proxy.apis`` module): the usage of a streamed answer, the request headers that say which
version and betas of its API a client speaks, and the proxy's own (summary) calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.apis.api import Api, SummaryAnswer
from proxy.upstream.client import Upstream
from proxy.upstream.completion import CompletionFailed, post_whole
from proxy.upstream.usage import UpstreamUsage


class ApiUsageScanner:
    """The usage of a streamed answer of ``api``, any managed API's (chat completions included),
    from its data lines (``EventCheck`` feeds ``line``; ``marker``: what a line must hold to be
    read, ``api.usage_marker``), each read by ``api.usage``: the largest prompt reported wins
    (Anthropic's ``message_start`` and ``message_delta``, the Responses API's
    ``response.completed``, a chat chunk's ``usage``), its cache figures with it, never mixed
    with another line's; the output tokens are the largest reported (Anthropic's last
    ``message_delta``), and so are the reasoning items the provider dropped (``message_start``,
    ``response.completed``)."""

    def __init__(self, api: Api) -> None:
        self.parse = api.usage
        self.marker = api.usage_marker  # a line without it says nothing about usage
        self.usage = UpstreamUsage()

    def line(self, line: bytes) -> None:
        if line.startswith(b"data:") and self.marker in line:
            got, was = self.parse(line[5:]), self.usage
            best = got if got.prompt >= was.prompt else was
            self.usage = replace(best, output=max(was.output, got.output),
                                 dropped=max(was.dropped, got.dropped))


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


class ApiCallFailed(CompletionFailed):
    """An answer that is not the API's shape (an error status is ``CompletionFailed``)."""


async def call(upstream: Upstream, api: Api, key: str | None, payload: Mapping[str, Any],
               extra_headers: Mapping[str, str] | None = None) -> SummaryAnswer:
    """One non-streamed call of ``api`` (a summary); raises ``CompletionFailed`` (its
    ``ApiCallFailed``) or ``ApiError``."""
    assert api.summary_answer is not None
    headers = api.headers({"Content-Type": "application/json", **(extra_headers or {})}, key)
    # The proxy's own headers (X-Context-Proxy-Org) go as given: the client's X-Context-* are
    # what ``api.headers`` drops.
    headers.update(extra_headers or {})
    raw = await post_whole(upstream, api.path, headers, payload, "summary")
    try:
        return api.summary_answer(raw)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ApiCallFailed(f"the upstream answer is not a {api.name} answer") from None
