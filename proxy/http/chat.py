"""``POST /v1/chat/completions``: parse, let the context service manage it, relay the answer.

The answer carries the ``X-Context-*`` headers whatever the upstream said. When the upstream
refuses the request for its context length, the service compacts regardless of the trigger and
the request is sent once more (the reactive safety net; never twice), unless that changed
nothing: the same body would only be refused again, so the refusal is relayed instead.
"""

from __future__ import annotations

import functools

from aiohttp import web

from proxy.apis import APIS
from proxy.apis.calls import ApiUsageScanner
from proxy.context import manual
from proxy.context.job import Job
from proxy.context.report import ContextReport
from proxy.http.apis import caller
from proxy.http.forward import Leg, forward, not_allowed
from proxy.http.parse import read_chat
from proxy.state import STATE, ProxyState
from proxy.upstream.answers import unusable_completion
from proxy.upstream.client import current_key, forwarding_conversation_id

API = APIS["chat"]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    principal = await caller(state, request, API)
    current_key.set(principal.upstream_key)
    chat = await read_chat(request, state.settings.max_body_bytes, state.checked)
    forced = manual.requested(request.headers.get(manual.HEADER),
                              state.settings.manual_compaction, chat.messages)
    job = await state.context.prepare(principal, chat, request.headers.get("X-Conversation-Id"),
                                      manual=forced)
    report = manual.noted(await state.context.manage(job), request.headers.get(manual.HEADER),
                          state.settings.manual_compaction)
    return await _forward(request, state, job, report)


async def _forward(request: web.Request, state: ProxyState, job: Job, report: ContextReport
                   ) -> web.StreamResponse:
    """Send upstream and relay (``forward``): a whole 200 must be a chat completion."""
    out = forwarding_conversation_id(API.headers(request.headers, job.principal.upstream_key),
                                     request.headers, state.settings.forward_conversation_id)
    leg = Leg(state.upstream_of(API), API.path, out, API.name, check=unusable_completion,
              usage=API.usage, scanner=functools.partial(ApiUsageScanner, API),
              stream_end=API.stream_end)
    return await forward(request, state, job, report, leg)


def add_routes(app: web.Application) -> None:
    resource = app.router.add_resource(API.route, name=API.name)
    resource.add_route("POST", chat_completions)
    resource.add_route("*", not_allowed)
