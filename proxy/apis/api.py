"""What one API means to the proxy, in one value: ``Api``. Each API is one module of this package
(``chat``, ``messages``, ``responses``) that builds its ``Api``; the routes, the upstream legs,
the error shapes and the summary calls read everything API-specific from it, so a new API is one
new module (and its entry in ``proxy.apis.APIS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from proxy.context.adapters import Adapted
from proxy.errors import bad_request
from proxy.upstream.client import request_headers
from proxy.upstream.usage import UpstreamUsage

Prompt = list[dict[str, Any]]


@dataclass(frozen=True)
class SummaryAnswer:
    """A summary call's answer as the API reports it."""

    text: str | None
    tool_call: bool
    usage: UpstreamUsage


@dataclass(frozen=True)
class Api:
    """One API: ``name`` (the route's name and the metrics' label), ``route`` (the proxy's path)
    and ``path`` (the upstream's, after its base URL), ``anthropic`` (its upstream is the
    Anthropic-compatible one, with that key under proxy keys).

    - ``read``: the request body as the stages' chat-style list (``None``: chat completions,
      which is that shape); ``check`` refuses (``ApiError`` 400) a body whose shape the proxy
      must understand and cannot; ``keeps_history``: a request whose history the upstream
      keeps (relayed unmanaged).
    - ``shape``: one of the proxy's own (OpenAI-shaped) error answers in this API's shape;
      ``stream_error``: the SSE event that ends a broken stream (``None``: the default one);
      ``stream_end``: the names of the events that end a whole stream (one ending without
      them is broken, whatever its framing said; ``upstream.answers.ends_stream``).
    - ``headers``: the client's headers as this API's upstream wants them, with its key.
    - ``usage``: the ``UpstreamUsage`` in an answer body or an event's data (prompt tokens,
      cache reads and writes, output tokens);
      ``usage_marker``: bytes without which a stream line says nothing of usage;
      ``answer_kind``: the (field, value) every whole answer of this API carries.
    - ``summary_body`` and ``summary_answer``: the proxy's own summary call in this API
      (``None``: the API has none of its own).
    - ``binding_controls``: on a model that binds reasoning to its history, what asks the
      provider to drop (not refuse) reasoning whose prefix the proxy changed.
    """

    name: str
    route: str
    path: str
    headers: Callable[[Mapping[str, str], str | None], CIMultiDict[str]]
    usage: Callable[[bytes], UpstreamUsage]
    usage_marker: bytes
    anthropic: bool = False
    read: Callable[[dict[str, Any]], Adapted] | None = None
    check: Callable[[dict[str, Any]], None] = lambda body: None
    keeps_history: Callable[[dict[str, Any]], bool] = lambda body: False
    shape: Callable[[web.Response], web.Response] = lambda response: response
    stream_error: bytes | None = None
    stream_end: tuple[bytes, ...] = ()
    answer_kind: tuple[str, str] | None = None
    summary_body: Callable[[Adapted, str, Prompt, int, bool], dict[str, Any]] | None = None
    summary_answer: Callable[[bytes], SummaryAnswer] | None = None
    # The provider's controls for reasoning whose prefix the proxy changed (``None``: none; the
    # provider drops such reasoning by itself): sets them on the body, returns the headers.
    binding_controls: Callable[[dict[str, Any], Mapping[str, str]], Mapping[str, str]] | None \
        = None


def first_int(pattern: re.Pattern[bytes], data: bytes) -> int:
    """The integer ``pattern``'s first group finds in ``data``; 0 when it finds none."""
    found = pattern.search(data)
    return int(found.group(1)) if found else 0


def openai_headers(incoming: Mapping[str, str], key: str | None) -> CIMultiDict[str]:
    """OpenAI's way: the client's headers (credentials dropped), the key as a bearer token."""
    return request_headers(incoming, key, identity=True)


def check_common(body: dict[str, Any]) -> None:
    """What every managed API's body must have: a model; a boolean ``stream``, a list of
    ``tools`` when given."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad_request("'model' is required and must be a non-empty string.", param="model")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad_request("'stream' must be a boolean.", param="stream")
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise bad_request("'tools' must be a list.", param="tools")


def summary_fields(body: Mapping[str, Any], cached: bool, routing: tuple[str, ...],
                   prefix: tuple[str, ...]) -> dict[str, Any]:
    """What a summary call repeats of the request ``body`` as the client sent it: its cache
    ``routing`` fields always, and when it rides the cached prefix (``cached``) the ``prefix``
    fields the provider keys that cache on."""
    names = (*routing, *prefix) if cached else routing
    return {k: body[k] for k in names if k in body}
