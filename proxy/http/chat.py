"""``POST /v1/chat/completions``: authenticate, parse, run the context pipeline, relay.

The response carries the ``X-Context-*`` headers of SPEC section 6 whatever the upstream
answered. When the upstream refuses the request for its context length, the proxy compacts
regardless of the trigger and retries once (the reactive safety net).
"""

from __future__ import annotations

import re
import time
from typing import Any

import aiohttp
from aiohttp import web

from proxy.auth import Principal
from proxy.context.service import Managed
from proxy.context.stages.ordering import ordering_problems
from proxy.errors import ApiError, bad_request
from proxy.http.parse import check_chat_request, dumps, parse_json_object
from proxy.state import STATE, ProxyState
from proxy.upstream.client import current_key, request_headers, response_headers
from proxy.upstream.relay import is_event_stream, relay_stream, relay_whole

_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
_STATED_LIMIT = re.compile(r"maximum context length is ([0-9][0-9,]*) tokens", re.IGNORECASE)
_OVERFLOW_MARKERS = ("context_length_exceeded", "maximum context length", "context length",
                     "too many tokens", "prompt is too long", "input is too long")


async def read_body(request: web.Request, limit: int) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError(413, f"The request body is {length} bytes; this proxy accepts at most "
                       f"{limit}.", code="request_too_large")
    return await request.read()  # aiohttp enforces client_max_size when the length is unknown


def check_ordering(body: dict[str, Any]) -> None:
    problems = ordering_problems(body["messages"])
    if problems:
        raise bad_request(f"Invalid message sequence: {problems[0]}", param="messages",
                          code="invalid_message_sequence")


def require_manual(state: ProxyState) -> None:
    """Refuse manual compaction (403) unless the deployment enables it."""
    if not state.settings.manual_compaction:
        raise ApiError(403, "Manual compaction is disabled on this deployment "
                       "(CONTEXT_PROXY_MANUAL_COMPACTION).", code="manual_compaction_disabled")


def require_assistant_turn(messages: list[dict[str, Any]]) -> None:
    """The eligibility floor of manual compaction: at least one prior assistant turn (409)."""
    if not any(m.get("role") == "assistant" for m in messages):
        raise ApiError(409, "Nothing to compact yet: the conversation has no assistant turn.",
                       code="nothing_to_compact")


def wants_manual(request: web.Request, state: ProxyState) -> bool:
    value = request.headers.get("X-Context-Compact", "").strip().lower()
    if not value:
        return False
    if value != "now":
        raise bad_request("'X-Context-Compact' accepts only 'now'.", param="X-Context-Compact")
    require_manual(state)
    return True


def is_overflow(status: int, body: bytes) -> bool:
    return status in (400, 413, 422) and any(m in body.decode("utf-8", "replace").lower()
                                            for m in _OVERFLOW_MARKERS)


def stated_window(body: bytes) -> int | None:
    """The limit an upstream states in its refusal ("maximum context length is 32768 tokens")."""
    found = _STATED_LIMIT.search(body.decode("utf-8", "replace"))
    return int(found.group(1).replace(",", "")) if found else None


async def manage(state: ProxyState, principal: Principal, body: dict[str, Any],
                 request: web.Request, *, force: bool = False, kind: str = "auto",
                 retried: str | None = None) -> Managed:
    ctx = state.context
    policy = state.policies.resolve(principal.org, principal.user)
    conversation = ctx.identify(principal, request.headers.get("X-Conversation-Id"),
                                body["messages"])
    return await ctx.manage(principal, policy, body, conversation, force=force, kind=kind,
                            retried=retried, size=request.content_length)


def outgoing(raw: bytes, body: dict[str, Any], managed: Managed) -> bytes:
    if managed.messages is None:
        return raw  # untouched: the client's exact bytes
    return dumps({**body, "messages": managed.messages})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    start = time.perf_counter()
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    current_key.set(principal.upstream_key)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = parse_json_object(raw)
    check_chat_request(body)
    check_ordering(body)
    manual = wants_manual(request, state)
    if manual:
        require_assistant_turn(body["messages"])
    managed = await manage(state, principal, body, request, force=manual,
                           kind="manual" if manual else "auto")
    headers = request_headers(request.headers, principal.upstream_key, identity=True)
    state.metrics.overhead.labels("chat").observe(time.perf_counter() - start)
    sent = time.perf_counter()
    resp = await state.upstream.open("POST", "/chat/completions", headers,
                                     outgoing(raw, body, managed))
    try:
        if not (200 <= resp.status < 300) and managed.retried is None:
            error_body = await resp.read()
            if not is_overflow(resp.status, error_body):
                return relay_error(state, resp, error_body, managed)
            resp.release()
            limit = stated_window(error_body)
            if limit is not None:
                state.context.windows.learn(body["model"], limit)
            managed = await manage(state, principal, body, request, force=True,
                                   retried="context_length_exceeded")
            resp = await state.upstream.open("POST", "/chat/completions", headers,
                                             outgoing(raw, body, managed))
        return await relay_answer(request, state, principal, body, resp, managed)
    finally:
        resp.release()
        state.metrics.upstream_duration.labels("chat").observe(time.perf_counter() - sent)


def relay_error(state: ProxyState, resp: aiohttp.ClientResponse, body: bytes,
                managed: Managed) -> web.Response:
    headers = response_headers(resp.headers)
    headers.update(managed.response_headers())
    return web.Response(status=resp.status, body=state.upstream.scrub(body), headers=headers)


async def relay_answer(request: web.Request, state: ProxyState, principal: Principal,
                       body: dict[str, Any], resp: aiohttp.ClientResponse, managed: Managed
                       ) -> web.StreamResponse:
    extra = managed.response_headers()
    if body.get("stream") is True and resp.status == 200 and is_event_stream(resp):
        usage = UsageScanner()
        out = await relay_stream(request, resp, extra, preamble=managed.sse_comment(),
                                 on_chunk=usage.feed)
        if usage.prompt_tokens:
            await state.context.record_usage(principal, managed, usage.prompt_tokens)
        return out
    out = await relay_whole(state.upstream, resp, extra)
    if resp.status == 200 and isinstance(out.body, bytes):
        await state.context.record_usage(principal, managed, prompt_tokens_of(out.body))
    return out


def prompt_tokens_of(body: bytes) -> int:
    """``usage.prompt_tokens`` of a chat completion body (0 when absent).

    A pattern, not a JSON parse: the key occurs once in a completion, and this runs on every
    answer."""
    found = _PROMPT_TOKENS.search(body)
    return int(found.group(1)) if found else 0


class UsageScanner:
    """Finds ``usage.prompt_tokens`` in an SSE stream line by line, holding only a partial line."""

    MAX_LINE = 1 << 20

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.MAX_LINE:
            self._partial = b""
        for line in lines:
            if line.startswith(b"data:") and b'"prompt_tokens"' in line:
                self.prompt_tokens = prompt_tokens_of(line[5:].strip()) or self.prompt_tokens


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions, name="chat")
