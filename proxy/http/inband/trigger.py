"""The agents' in-band compaction where the upstream cannot serve it (SPEC section 11): a
Responses request whose last input item is ``compaction_trigger`` (Codex's own auto-compaction)
is relayed with the trigger last while the upstream serves it; the proxy answers it itself when
the platform says the upstream does not (``upstream.serves_compaction_trigger: false``) or when,
under ``auto``, the upstream refused the trigger once for that model (a 400 naming it;
remembered per upstream and model for the process's life, and the refused request answered the
proxy's way at once).

The proxy's answer: one summary of the request's items before the trigger, made on the summary
path compactions use (the policy's summary model, timeout and ``summary_max_tokens``, in the
request's own API, pieces merged when long), carried by exactly one opaque ``compaction`` item
(``proxy.apis.compaction_items``), streamed or whole. A summary that cannot be made is a 502 in
the API's error shape, never a half item. Later requests carrying that item get it expanded into
the summary message before anything else reads them (``expanded``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from proxy.apis import calls
from proxy.apis import compaction_items as ci
from proxy.apis.api import Api
from proxy.auth import Principal
from proxy.context.adapters import AdapterError
from proxy.context.job import ChatRequest
from proxy.context.offload import run_off_loop
from proxy.context.report import ContextReport
from proxy.context.stages.shared import format_summary
from proxy.context.stages.summary import SummaryFailed
from proxy.context.summary.summarizer import summarize_messages
from proxy.errors import ApiError, bad_request
from proxy.state import ProxyState

log = logging.getLogger("context_proxy.context")

FAILED = "compaction_summary_failed"


def expanded(body: dict[str, Any], raw: bytes) -> tuple[dict[str, Any], bytes]:
    """``body`` and its bytes with every proxy-made ``compaction`` item expanded into its summary
    message (``compaction_items.expand``); as they came when there is none."""
    new = ci.expand(body, format_summary)
    return (body, raw) if new is None else (new, orjson.dumps(new))


def unmasked(api: Api, body: dict[str, Any], report: ContextReport) -> ContextReport:
    """The report a request ending in ``compaction_trigger`` is sent by: as the client sent
    it when that fits the window (the upstream's summary then reads the outputs masking would
    have hidden, as the proxy's own summary reads their originals), else ``report``."""
    if api.name != "responses" or not ci.ends_in_trigger(body) or report.messages is None \
            or report.divider is not None or report.tokens_before > report.window:
        return report
    return replace(report, messages=None, masked=0, tokens_after=report.tokens_before)


def _pair(state: ProxyState, body: dict[str, Any]) -> tuple[str, str]:
    return state.upstream.base_url, str(body.get("model"))


def answered_here(state: ProxyState, api: Api, body: dict[str, Any]) -> bool:
    """Whether the proxy answers this request's trigger without asking the upstream."""
    if api.name != "responses" or not ci.ends_in_trigger(body):
        return False
    mode = state.settings.serves_compaction_trigger
    return mode == "false" or (mode == "auto" and _pair(state, body) in state.trigger_refused)


def learned(state: ProxyState, api: Api, body: dict[str, Any], out: web.StreamResponse) -> bool:
    """Whether ``out`` (an error answer not yet sent) is the upstream refusing this request's
    trigger under ``auto``: then it is remembered, and the caller answers the proxy's way."""
    if api.name != "responses" or state.settings.serves_compaction_trigger != "auto" \
            or not ci.ends_in_trigger(body) or not isinstance(out, web.Response):
        return False
    answer = out.body if isinstance(out.body, bytes) else b""
    if not ci.refuses_trigger(out.status, answer):
        return False
    state.trigger_refused.add(_pair(state, body))
    log.info("the upstream refused compaction_trigger for %s: the proxy answers it from now on",
             body.get("model"))
    return True


async def compaction_item(state: ProxyState, api: Api, principal: Principal,
                          headers: Mapping[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The one ``compaction`` item answering ``body``'s trigger: a summary of the items before
    it. Raises ``ApiError`` 400 for a request the adapter cannot read, 502 when no summary was
    made."""
    try:
        assert api.read is not None
        adapted = replace(api.read(body), headers=calls.api_headers(headers))
    except AdapterError as e:
        raise bad_request(str(e), param=e.param, code="invalid_message_sequence") from None
    chat = ChatRequest(orjson.dumps(body), body, adapted.messages, body["model"], adapted.tools,
                       body.get("stream") is True, adapted=adapted)
    job = await state.context.prepare(principal, chat, headers.get("X-Conversation-Id"))
    cp = job.policy.compaction
    model = cp.summary_model or job.request.model
    covered = [m for m in adapted.messages[:-1] if m.get("role") != "system"]
    if not covered:
        return ci.make_item("Nothing happened before this point.", cp.summary_role)
    window = await state.context.windows.window(model, job.policy) \
        or job.policy.fallback_window
    try:
        text, answers = await summarize_messages(
            covered, counter=state.context.counter, model=model,
            summarize=state.context.summarizer(job, model), max_tokens=cp.summary_max_tokens,
            summary_window=window, offload=run_off_loop)
    except (SummaryFailed, TimeoutError, ValueError, ApiError) as e:
        log.warning("compaction_trigger of %s not answered: %s", principal.org, e)
        raise ApiError(502, "The compaction summary could not be made; send the request "
                       "again.", code=FAILED, type_="upstream_error") from None
    for answer in answers:
        state.context.ledger.book_summary(job, model, answer.usage)
    return ci.make_item(text, cp.summary_role)


async def answer_events(state: ProxyState, api: Api, principal: Principal,
                        headers: Mapping[str, str], body: dict[str, Any]
                        ) -> list[dict[str, Any]]:
    """The events of the proxy's streamed answer to ``body``'s trigger (``compaction_item``'s
    errors raised)."""
    return ci.answer_events(body, await compaction_item(state, api, principal, headers, body))


async def answer_http(request: web.Request, state: ProxyState, api: Api, principal: Principal,
                      body: dict[str, Any]) -> web.StreamResponse:
    """The proxy's answer to ``body``'s trigger on ``POST /v1/responses``: streamed when the
    request streams, else one whole response; an error in the API's shape."""
    try:
        item = await compaction_item(state, api, principal, request.headers, body)
    except ApiError as e:
        return api.shape(e.response())
    events = ci.answer_events(body, item)
    if body.get("stream") is not True:
        return web.json_response(events[-1]["response"])
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                      "Cache-Control": "no-cache"})
    await out.prepare(request)
    await out.write(ci.sse(events))
    await out.write_eof()
    return out
