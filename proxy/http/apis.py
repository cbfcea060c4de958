"""The routes of the APIs read through an adapter (``proxy.apis.ADAPTED``: Anthropic Messages,
OpenAI Responses): the same context management as chat completions, everything API-specific
taken from the route's ``Api`` (SPEC section 11).

A request whose history the upstream keeps (``Api.keeps_history``: a Responses request naming a
``previous_response_id``) is relayed unchanged and says so (``X-Context-History: upstream``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web

from proxy.apis import ADAPTED, calls
from proxy.apis.api import Api
from proxy.auth import Principal
from proxy.context import manual
from proxy.context.accounting import overhead
from proxy.context.adapters import Adapted, AdapterError
from proxy.context.job import ChatRequest, Job
from proxy.context.report import ContextReport
from proxy.errors import ApiError, bad_request
from proxy.http.forward import (
    HttpSink,
    Leg,
    Sink,
    forward,
    not_allowed,
    own_time,
    read_timed,
    send_timed,
)
from proxy.http.inband import trigger
from proxy.http.parse import parse_json_object, read_body
from proxy.state import STATE, ProxyState
from proxy.upstream.client import current_key, forwarding_conversation_id
from proxy.upstream.relay import PROXY_MADE, Check, answer_whole, error_response, is_event_stream

HISTORY = "X-Context-History"


async def caller(state: ProxyState, request: web.Request, api: Api) -> Principal:
    """The authenticated caller of ``api``, with the key its calls carry upstream
    (``ProxyState.upstream_key``). Raises the authenticator's 401."""
    principal = await state.auth.authenticate(request)
    key = state.upstream_key(api, principal)
    return principal if key == principal.upstream_key else replace(principal, upstream_key=key)


async def managed(request: web.Request, api: Api) -> web.StreamResponse:
    """The handler of every API read through an adapter: authenticate, read, check, then
    relay unmanaged (a history the upstream keeps) or manage and forward."""
    state = request.app[STATE]
    principal = await caller(state, request, api)
    current_key.set(principal.upstream_key)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = parse_json_object(raw)
    api.check(body)
    if api.name == "responses":  # the proxy's own compaction items never reach the upstream
        body, raw = trigger.expanded(body, raw)
    if api.keeps_history(body):
        return await relay_as_is(HttpSink(request), state, api, principal, request.headers, raw,
                                 request.query_string)
    if trigger.answered_here(state, api, body):
        return await trigger.answer_http(request, state, api, principal, body)
    job, report = await manage(state, api, principal, request.headers, raw, body)
    leg = leg_for(state, api, request.headers, job, request.query_string)
    if report.drop_changed and api.binding_controls is not None:  # body: what encodes it
        leg = replace(leg, headers=api.binding_controls(body, leg.headers))
    out = await forward(request, state, job, report, leg)
    if trigger.learned(state, api, body, out):  # refused by the upstream: answered here
        return await trigger.answer_http(request, state, api, principal, body)
    return out


async def manage(state: ProxyState, api: Api, principal: Principal, headers: Mapping[str, str],
                 raw: bytes, body: dict[str, Any]) -> tuple[Job, ContextReport]:
    """The managed prologue after auth and ``api.check``: read ``body`` (``raw``, its bytes) with
    the API's adapter, prepare the job (conversation identity, manual compaction from
    ``headers``) and run the stages. Raises ``ApiError`` 400 for a tool sequence the API
    refuses."""
    try:
        assert api.read is not None
        adapted: Adapted = api.read(body)
    except AdapterError as e:
        raise bad_request(str(e), param=e.param, code="invalid_message_sequence") from None
    adapted = replace(adapted, headers=calls.api_headers(headers))
    chat = ChatRequest(raw, body, adapted.messages, body["model"], adapted.tools,
                       body.get("stream") is True, adapted=adapted)
    enabled = state.settings.manual_compaction
    forced = manual.requested(headers.get(manual.HEADER), enabled, chat.messages)
    job = await state.context.prepare(principal, chat, headers.get("X-Conversation-Id"),
                                      manual=forced)
    report = manual.noted(trigger.unmasked(api, body, await state.context.manage(job)),
                          headers.get(manual.HEADER), enabled)
    return job, report


def leg_for(state: ProxyState, api: Api, headers: Mapping[str, str], job: Job, query: str = ""
            ) -> Leg:
    """The API's upstream leg for ``job``, with the client's ``headers`` as the API wants them."""
    out = forwarding_conversation_id(api.headers(headers, job.principal.upstream_key), headers,
                                     state.settings.forward_conversation_id)
    return Leg(state.upstream_of(api), api.path, out,
               api.name, check=_answer_check(api), usage=api.usage,
               scanner=functools.partial(calls.ApiUsageScanner, api), query=query,
               shape=api.shape, error_event=api.stream_error, stream_end=api.stream_end)


def _answer_check(api: Api) -> Check:
    assert api.answer_kind is not None
    key, kind = api.answer_kind

    def check(body: bytes) -> ApiError | None:
        try:
            data = parse_json_object(body)
        except ApiError:
            data = None
        if data is None or data.get(key) != kind:
            return ApiError(502, f"The upstream answer is not a {api.name} answer.",
                            code="upstream_invalid_answer")
        return None

    return check


async def relay_as_is(sink: Sink, state: ProxyState, api: Api, principal: Principal,
                      headers: Mapping[str, str], raw: bytes, query: str = ""
                      ) -> web.StreamResponse:
    """A request whose history the upstream keeps: sent as it came, nothing to manage; a good
    answer goes to ``sink``, an error answer is returned unsent. The upstream leg is booked in
    ``context_proxy_upstream_duration_seconds`` like a managed one (``forward``)."""
    upstream = state.upstream_of(api)
    out_headers = forwarding_conversation_id(api.headers(headers, principal.upstream_key),
                                             headers, state.settings.forward_conversation_id)
    note = {HISTORY: "upstream", "X-Context-Compaction": "none"}
    sent = time.perf_counter()
    try:
        resp = await send_timed(upstream, api.path, out_headers, raw, query, api.name)
    except ApiError as e:
        state.metrics.upstream_for(api.name)(time.perf_counter() - sent)
        return e.response(headers=_stamped(state, api, note))
    try:
        if resp.status == 200 and is_event_stream(resp):
            return await sink.stream(resp, _stamped(state, api, note), b"", None, upstream, None)
        try:
            body = await read_timed(resp)
        except ApiError as e:
            failed = upstream.shutting_down() if upstream.stopping else e
            return api.shape(error_response(failed, _stamped(state, api, note)))
        answer = answer_whole(upstream, resp, body, _stamped(state, api, note))
        if answer.status == 200:
            await sink.whole(answer)
        return api.shape(answer) if answer.get(PROXY_MADE) else answer
    finally:
        resp.release()
        state.metrics.upstream_for(api.name)(time.perf_counter() - sent)


def _stamped(state: ProxyState, api: Api, note: dict[str, str]) -> dict[str, str]:
    """``note`` with the proxy's own time until now (``own_time``)."""
    return {**note, overhead.HEADER: own_time(state, api.name)}


def add_routes(app: web.Application, adapted: Sequence[Api] = ADAPTED) -> None:
    """One route per API read through an adapter, all on ``managed``."""
    for api in adapted:
        resource = app.router.add_resource(api.route, name=api.name)
        resource.add_route("POST", functools.partial(managed, api=api))
        resource.add_route("*", not_allowed)
