"""``POST /v1/chat/completions``: parse, let the context service manage it, relay the answer.

The answer carries the ``X-Context-*`` headers whatever the upstream said. When the upstream
refuses the request for its context length, the service compacts regardless of the trigger and
the request is sent once more (the reactive safety net; never twice), unless that changed
nothing: the same body would only be refused again, so the refusal is relayed instead.
"""

from __future__ import annotations

import time
from dataclasses import replace

import aiohttp
from aiohttp import web

from proxy.context import manual
from proxy.context.job import Job
from proxy.context.report import ContextReport
from proxy.errors import ApiError
from proxy.http.parse import read_chat
from proxy.state import STATE, ProxyState
from proxy.upstream.answers import EventCheck, unusable_completion
from proxy.upstream.client import current_key, request_headers
from proxy.upstream.relay import (
    answer_whole,
    is_encoded,
    is_event_stream,
    read_body,
    relay_stream,
    relay_whole,
)
from proxy.upstream.usage import (
    UsageScanner,
    cached_tokens_of,
    is_overflow,
    prompt_tokens_of,
    stated_window,
)

PATH = "/chat/completions"


async def chat_completions(request: web.Request) -> web.StreamResponse:
    start = time.perf_counter()
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    current_key.set(principal.upstream_key)
    chat = await read_chat(request, state.settings.max_body_bytes, state.checked)
    forced = manual.requested(request.headers.get(manual.HEADER),
                              state.settings.manual_compaction, chat.messages)
    job = await state.context.prepare(principal, chat, request.headers.get("X-Conversation-Id"),
                                      manual=forced)
    report = await state.context.manage(job)
    hint = manual.ignored(request.headers.get(manual.HEADER), state.settings.manual_compaction)
    if hint:
        report = replace(report, notes=hint)
    state.metrics.overhead_chat.observe(time.perf_counter() - start)
    return await _forward(request, state, job, report)


async def _forward(request: web.Request, state: ProxyState, job: Job, report: ContextReport
                   ) -> web.StreamResponse:
    """Send upstream, retry once on a context-length refusal that compaction could help with,
    relay, record the usage."""
    headers = request_headers(request.headers, job.principal.upstream_key, identity=True)
    sent = time.perf_counter()
    body = job.request.outgoing(report)
    try:
        resp = await state.upstream.open("POST", PATH, headers, body, route="chat")
    except ApiError as e:  # unreachable or too slow: still say what the proxy did
        state.metrics.upstream_chat.observe(time.perf_counter() - sent)
        return e.response(headers=report.headers())
    try:
        if not 200 <= resp.status < 300 and report.retried is None:
            error_body = await read_body(resp)
            if not is_overflow(resp.status, error_body):
                return _relay_error(state, resp, error_body, report)
            retry = await state.context.retry_overflow(job, stated_window(error_body))
            retry = replace(retry, notes=report.notes)
            again = job.request.outgoing(retry)
            if again == body:  # compaction could not shrink it: the same refusal again
                return _relay_error(state, resp, error_body, replace(retry, retried=None))
            resp.release()
            report = retry
            try:
                resp = await state.upstream.open("POST", PATH, headers, again, route="chat")
            except ApiError as e:
                return e.response(headers=report.headers())
        return await _relay_answer(request, state, job, resp, report)
    finally:
        resp.release()
        state.metrics.upstream_chat.observe(time.perf_counter() - sent)


def _relay_error(state: ProxyState, resp: aiohttp.ClientResponse, body: bytes,
                 report: ContextReport) -> web.Response:
    """An upstream error answer with the ``X-Context-*`` headers: a JSON body relayed scrubbed
    of the upstream key, any other replaced by an OpenAI-shaped error (``answer_whole``)."""
    return answer_whole(state.upstream, resp, body, report.headers())


async def _relay_answer(request: web.Request, state: ProxyState, job: Job,
                        resp: aiohttp.ClientResponse, report: ContextReport
                        ) -> web.StreamResponse:
    """Relay the answer with the ``X-Context-*`` headers and record its usage. A stream is
    checked line by line (a data line that is not JSON ends it with the SSE error event); a
    whole 200 must be a chat completion (else 502); a broken read is a 502."""
    extra = report.headers()
    if job.request.stream and resp.status == 200 and is_event_stream(resp):
        usage = UsageScanner()
        check = None if is_encoded(resp) else EventCheck(on_line=usage.line)
        out = await relay_stream(request, resp, extra, preamble=report.sse_comment(),
                                 check=check, tracked=state.upstream.streams,
                                 secret=state.upstream.secret)
        await state.context.record_usage(job, report, usage.prompt_tokens, usage.cached_tokens)
        return out
    out = await relay_whole(state.upstream, resp, extra, check=unusable_completion)
    if out.status == 200 and isinstance(out.body, bytes):
        await state.context.record_usage(job, report, prompt_tokens_of(out.body),
                                         cached_tokens_of(out.body))
    return out


async def not_allowed(request: web.Request) -> web.StreamResponse:
    """Any other method on the chat path: the proxy's own 405, not the catch-all relay."""
    raise web.HTTPMethodNotAllowed(request.method, ["POST"])


def add_routes(app: web.Application) -> None:
    resource = app.router.add_resource("/v1/chat/completions", name="chat")
    resource.add_route("POST", chat_completions)
    resource.add_route("*", not_allowed)
