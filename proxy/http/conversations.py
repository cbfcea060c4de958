"""A conversation's records: ``GET .../dividers``, ``GET .../spills/{id}`` and manual compaction
``POST .../compact`` under ``/v1/conversations/{conversation_id}`` (SPEC sections 4 and 6).

A conversation is addressed within the caller's own organization (its stored key is namespaced
by organization), so another organization's conversation answers 404 like a missing one.
"""

from __future__ import annotations

from aiohttp import web

from proxy.context import manual
from proxy.context.identity import conversation_key, valid_public_id
from proxy.errors import ApiError, bad_request
from proxy.http.parse import read_chat
from proxy.state import STATE

_NOT_FOUND = ApiError(404, "No such conversation.", code="conversation_not_found")


async def _conversation(request: web.Request) -> tuple[str, str]:
    state = request.app[STATE]
    principal = await state.auth.authenticate(request)
    public = request.match_info["conversation_id"]
    if not valid_public_id(public):
        raise _NOT_FOUND
    key = conversation_key(principal.namespace, public)
    if not await state.store.run(state.context.records.exists, key):
        raise _NOT_FOUND
    return public, key


async def list_dividers(request: web.Request) -> web.Response:
    public, key = await _conversation(request)
    state = request.app[STATE]
    data = await state.store.run(state.context.records.dividers, key)
    return web.json_response({"object": "list", "conversation_id": public, "data": data})


async def get_spill(request: web.Request) -> web.Response:
    _, key = await _conversation(request)
    state = request.app[STATE]
    spill = await state.store.run(state.context.records.spill, key,
                                  request.match_info["spill_id"])
    if spill is None:
        raise ApiError(404, "No such spill (or it expired).", code="spill_not_found")
    return web.json_response(spill)


async def compact_now(request: web.Request) -> web.Response:
    """Manual compaction: the same policy, regardless of the trigger (SPEC section 6)."""
    state = request.app[STATE]
    principal = await state.auth.authenticate(request)
    manual.require_enabled(state.settings.manual_compaction)
    public = request.match_info["conversation_id"]
    if not valid_public_id(public):
        raise bad_request("The conversation id must be 1–256 printable characters.")
    chat = await read_chat(request, state.settings.max_body_bytes, state.checked)
    manual.require_assistant_turn(chat.messages)
    # The body holds the conversation: one the proxy has not seen yet can be compacted too.
    key = conversation_key(principal.namespace, public)
    job = await state.context.prepare(principal, chat, None, manual=True,
                                      conversation=(public, key))
    report = await state.context.manage(job)
    if report.outcome == "failed":
        raise ApiError(502, "The summary could not be made; the conversation is unchanged.",
                       code="compaction_failed")
    if report.divider is None:
        raise ApiError(409, "Nothing to compact yet: every message is kept verbatim.",
                       code="nothing_to_compact")
    return web.json_response({
        "object": "conversation.compaction", "conversation_id": public,
        "status": report.outcome, "messages": report.messages,
        "divider": report.divider.divider(), "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after}, headers=report.headers())


def add_routes(app: web.Application) -> None:
    base = "/v1/conversations/{conversation_id}"
    app.router.add_get(base + "/dividers", list_dividers, name="dividers")
    app.router.add_get(base + "/spills/{spill_id}", get_spill, name="spills")
    app.router.add_post(base + "/compact", compact_now, name="compact")
