"""``/v1/conversations/{id}/…``: dividers, spills and manual compaction.

Every route resolves the conversation within the caller's organization, so another
organization's conversation (even under the same ``X-Conversation-Id``) answers 404: ids never
leak across organizations.
"""

from __future__ import annotations

from aiohttp import web

from proxy.context.identity import conversation_key, valid_public_id
from proxy.errors import ApiError, bad_request
from proxy.http.chat import check_ordering, read_body, require_assistant_turn, require_manual
from proxy.http.parse import check_chat_request, parse_json_object
from proxy.state import STATE


def _conversation(request: web.Request) -> tuple[str, str]:
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    public = request.match_info["conversation_id"]
    if not valid_public_id(public):
        raise ApiError(404, "No such conversation.", code="conversation_not_found")
    key = conversation_key(principal.org, public)
    if not state.context.records.exists(key):
        raise ApiError(404, "No such conversation.", code="conversation_not_found")
    return public, key


async def list_dividers(request: web.Request) -> web.Response:
    public, key = _conversation(request)
    data = request.app[STATE].context.records.dividers(key)
    return web.json_response({"object": "list", "conversation_id": public, "data": data})


async def get_spill(request: web.Request) -> web.Response:
    _, key = _conversation(request)
    spill = request.app[STATE].context.records.spill(key, request.match_info["spill_id"])
    if spill is None:
        raise ApiError(404, "No such spill (or it expired).", code="spill_not_found")
    return web.json_response(spill)


async def compact_now(request: web.Request) -> web.Response:
    """Manual compaction: the same policy, regardless of the trigger (SPEC section 6)."""
    state = request.app[STATE]
    principal = state.auth.authenticate(request)
    require_manual(state)
    public = request.match_info["conversation_id"]
    if not valid_public_id(public):
        raise bad_request("The conversation id must be 1–256 printable characters.")
    body = parse_json_object(await read_body(request, state.settings.max_body_bytes))
    check_chat_request(body)
    check_ordering(body)
    require_assistant_turn(body["messages"])
    key = conversation_key(principal.org, public)
    if not state.context.records.exists(key):
        raise ApiError(404, "No such conversation.", code="conversation_not_found")
    policy = state.policies.resolve(principal.org, principal.user)
    managed = await state.context.manage(principal, policy, body, (public, key), force=True,
                                         kind="manual")
    if managed.outcome == "failed":
        raise ApiError(502, "The summary could not be made; the conversation is unchanged.",
                       code="compaction_failed")
    if managed.divider is None:
        raise ApiError(409, "Nothing to compact yet: every message is kept verbatim.",
                       code="nothing_to_compact")
    return web.json_response({
        "object": "conversation.compaction", "conversation_id": public,
        "status": managed.outcome, "messages": managed.messages,
        "divider": managed.divider.divider(), "tokens_before": managed.tokens_before,
        "tokens_after": managed.tokens_after}, headers=managed.response_headers())


def add_routes(app: web.Application) -> None:
    base = "/v1/conversations/{conversation_id}"
    app.router.add_get(base + "/dividers", list_dividers, name="dividers")
    app.router.add_get(base + "/spills/{spill_id}", get_spill, name="spills")
    app.router.add_post(base + "/compact", compact_now, name="compact")
