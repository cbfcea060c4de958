"""``POST /v1/messages`` (Anthropic Messages) and ``POST /v1/responses`` (OpenAI Responses): the
same context management as chat completions, through the API's adapter, answered in that API's
own shape (SPEC section 11).

A Responses request that names a ``previous_response_id`` keeps its history at the upstream:
it is relayed unchanged and says so (``X-Context-History: upstream``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from proxy.auth import Principal
from proxy.context import manual
from proxy.context.adapters import Adapted, AdapterError, anthropic, responses
from proxy.context.job import ChatRequest, Job
from proxy.context.report import ContextReport
from proxy.errors import ApiError, bad_request
from proxy.http.forward import HttpSink, Leg, Sink, forward, not_allowed
from proxy.http.middleware import shaped
from proxy.http.parse import parse_json_object, read_body
from proxy.state import STATE, ProxyState
from proxy.upstream import apis
from proxy.upstream.client import Upstream, current_key
from proxy.upstream.relay import (
    ANTHROPIC_STREAM_ERROR,
    Check,
    is_event_stream,
    relay_whole,
)

READERS = {"messages": anthropic.read, "responses": responses.read}
HISTORY = "X-Context-History"


def _principal(state: ProxyState, request: web.Request, api: str) -> Principal:
    """The caller; with proxy keys, an Anthropic request carries the platform's Anthropic key."""
    principal = state.auth.authenticate(request)
    if api == "messages" and state.auth.mode == "proxy_keys":
        principal = replace(principal, upstream_key=state.settings.anthropic_api_key)
    return principal


def check(api: str, body: dict[str, Any]) -> None:
    """Refuse (``ApiError`` 400) a body the API's upstream would refuse for its shape."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad_request("'model' is required and must be a non-empty string.", param="model")
    if api == "messages" and (not isinstance(body.get("max_tokens"), int)
                              or isinstance(body.get("max_tokens"), bool)):
        raise bad_request("'max_tokens' is required and must be an integer.",
                          param="max_tokens")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad_request("'stream' must be a boolean.", param="stream")
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise bad_request("'tools' must be a list.", param="tools")


def keeps_history_upstream(api: str, body: dict[str, Any]) -> bool:
    """A Responses request whose history the upstream keeps: relayed, never managed."""
    return api == "responses" and body.get("previous_response_id") is not None


def _upstream(state: ProxyState, api: str) -> Upstream:
    return state.anthropic if api == "messages" else state.upstream


async def managed(request: web.Request, api: str) -> web.StreamResponse:
    start = time.perf_counter()
    state = request.app[STATE]
    principal = _principal(state, request, api)
    current_key.set(principal.upstream_key)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = parse_json_object(raw)
    check(api, body)
    if keeps_history_upstream(api, body):
        return await relay_as_is(HttpSink(request), state, api, principal, request.headers, raw,
                                 request.query_string)
    job, report = await manage(state, api, principal, request.headers, raw, body, start)
    return await forward(request, state, job, report,
                         leg_for(state, api, request.headers, job, request.query_string))


async def manage(state: ProxyState, api: str, principal: Principal, headers: Mapping[str, str],
                 raw: bytes, body: dict[str, Any], start: float) -> tuple[Job, ContextReport]:
    """The managed prologue after auth and ``check``: read ``body`` (``raw``, its bytes) with
    the API's adapter, prepare the job (conversation identity, manual compaction from
    ``headers``) and run the stages. Raises ``ApiError`` 400 for a tool sequence the API
    refuses; books the proxy's overhead since ``start``."""
    try:
        adapted: Adapted = READERS[api](body)
    except AdapterError as e:
        raise bad_request(str(e), param=e.param, code="invalid_message_sequence") from None
    adapted = replace(adapted, headers=apis.api_headers(headers))
    chat = ChatRequest(raw, body, adapted.messages, body["model"], adapted.tools,
                       body.get("stream") is True, adapted=adapted)
    enabled = state.settings.manual_compaction
    forced = manual.requested(headers.get(manual.HEADER), enabled, chat.messages)
    job = await state.context.prepare(principal, chat, headers.get("X-Conversation-Id"),
                                      manual=forced)
    report = await state.context.manage(job)
    hint = manual.ignored(headers.get(manual.HEADER), enabled)
    if hint:
        report = replace(report, notes={**report.notes, **hint})
    state.metrics.overhead.labels(api).observe(time.perf_counter() - start)
    return job, report


def leg_for(state: ProxyState, api: str, headers: Mapping[str, str], job: Job, query: str = ""
            ) -> Leg:
    """The API's upstream leg for ``job``, with the client's ``headers`` as the API wants them."""
    return Leg(_upstream(state, api), apis.PATHS[api],
               apis.headers_for(api, headers, job.principal.upstream_key), api,
               check=_answer_check(api), usage=functools.partial(apis.usage_of, api),
               scanner=functools.partial(apis.ApiUsageScanner, api), query=query,
               shape=functools.partial(shaped, api),
               error_event=ANTHROPIC_STREAM_ERROR if api == "messages" else None)


def _answer_check(api: str) -> Check:
    key, kind = ("type", "message") if api == "messages" else ("object", "response")

    def check(body: bytes) -> ApiError | None:
        try:
            data = parse_json_object(body)
        except ApiError:
            data = None
        if data is None or data.get(key) != kind:
            return ApiError(502, f"The upstream answer is not a {api} answer.",
                            code="upstream_invalid_answer")
        return None

    return check


async def relay_as_is(sink: Sink, state: ProxyState, api: str, principal: Principal,
                      headers: Mapping[str, str], raw: bytes, query: str = ""
                      ) -> web.StreamResponse:
    """A request whose history the upstream keeps: sent as it came, nothing to manage; a good
    answer goes to ``sink``, an error answer is returned unsent."""
    upstream = _upstream(state, api)
    out_headers = apis.headers_for(api, headers, principal.upstream_key)
    note = {HISTORY: "upstream", "X-Context-Compaction": "none"}
    try:
        resp = await upstream.open("POST", apis.PATHS[api], out_headers, raw, query, route=api)
    except ApiError as e:
        return e.response(headers=note)
    try:
        if resp.status == 200 and is_event_stream(resp):
            return await sink.stream(resp, note, b"", None, upstream, None)
        answer = await relay_whole(upstream, resp, note)
        if answer.status == 200:
            await sink.whole(answer)
        return answer
    finally:
        resp.release()


async def messages(request: web.Request) -> web.StreamResponse:
    return await managed(request, "messages")


async def responses_(request: web.Request) -> web.StreamResponse:
    return await managed(request, "responses")


def add_routes(app: web.Application) -> None:
    for path, name, handler in (("/v1/messages", "messages", messages),
                                ("/v1/responses", "responses", responses_)):
        resource = app.router.add_resource(path, name=name)
        resource.add_route("POST", handler)
        resource.add_route("*", not_allowed)
