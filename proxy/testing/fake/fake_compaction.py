"""The fake upstream's side of the Responses API's in-band compaction (Codex's "remote compaction
v2"; SPEC sections 2 and 11), hooked into ``fake_apis.answer``.

With ``FakeUpstream.serves_compaction_trigger`` (the default) a request whose last input item is
``{"type": "compaction_trigger"}`` is answered, streamed or whole, with exactly one output item
``{"type": "compaction", "id": "cmp_...", "encrypted_content": ...}``: base64 of the fake's
summary of the transcript (``agent_model.fact_summarizer``: every ``FACT-nn: ...`` line) with a
check of its own. A later request holding such an item is read by the responder as if the
summary replaced everything before it (``expanded``).

Without it the fake answers as an upstream without the feature: 400 ``invalid_request_error``
naming the unknown item type ``compaction_trigger`` (``param`` ``input``), and a ``compaction``
item it did not issue (one the proxy made reaching it would be a bug).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any, Protocol

import orjson
from aiohttp import web

from proxy.testing.agent_model import fact_summarizer
from proxy.testing.fake.fake_events import responses_events, responses_object
from proxy.testing.fake.strict_responses import RESPONSES_ITEM_TYPES, _invalid

TRIGGER = "compaction_trigger"
COMPACTION = "compaction"
_MARK = "fake-compaction:"  # what the fake's blobs start with, once decoded
RESPONSES = "/v1/responses"


class Fake(Protocol):
    """What this module needs of ``FakeUpstream`` (whose ``serves_compaction_trigger`` it reads
    with ``getattr``: ``fake_apis``' own protocol of it does not name that flag)."""

    stream_chunks: int

    def measure(self, chat: dict[str, Any]) -> tuple[int, list[int], int]: ...
    async def _stream(self, request: web.Request, events: list[bytes], fault: Any
                      ) -> web.StreamResponse: ...


def _check(summary: str) -> str:
    return hashlib.sha256(("fake-upstream\0" + summary).encode()).hexdigest()[:16]


def issue(summary: str) -> dict[str, Any]:
    """A ``compaction`` item as the fake issues it, carrying ``summary``."""
    doc = orjson.dumps({"summary": summary, "check": _check(summary)})
    blob = base64.b64encode(_MARK.encode() + doc).decode()
    return {"type": COMPACTION, "id": "cmp_" + secrets.token_hex(12), "encrypted_content": blob}


def issued_summary(item: Any) -> str | None:
    """The summary of a ``compaction`` item the fake issued; ``None`` for any other."""
    try:
        raw = base64.b64decode(item["encrypted_content"], validate=True)
        doc = orjson.loads(raw.removeprefix(_MARK.encode())) if raw.startswith(
            _MARK.encode()) else None
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), str) \
            or doc.get("check") != _check(doc["summary"]):
        return None
    return str(doc["summary"])


def expanded(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the responder reads it: the last issued ``compaction`` item and everything
    before it replaced by a user message of its summary."""
    items = body.get("input")
    if not isinstance(items, list):
        return body
    for k in range(len(items) - 1, -1, -1):
        item = items[k]
        if isinstance(item, dict) and item.get("type") == COMPACTION:
            summary = issued_summary(item)
            if summary is not None:
                head = {"type": "message", "role": "user", "content": summary}
                return {**body, "input": [head, *items[k + 1:]]}
    return body


def refusal(fake: Fake, body: dict[str, Any]) -> web.Response | None:
    """The fake's 400, when it does not serve the trigger, for an item it cannot take: the
    trigger, a ``compaction`` item it did not issue."""
    items = body.get("input")
    for n, item in enumerate(items if isinstance(items, list) else []):
        kind = item.get("type") if isinstance(item, dict) else None
        if getattr(fake, "serves_compaction_trigger", True):
            continue
        if kind == TRIGGER:
            known = sorted(RESPONSES_ITEM_TYPES)
            return _error(_invalid(TRIGGER, known) + f" (input[{n}].type)", "input")
        if kind == COMPACTION and issued_summary(item) is None:
            return _error(f"Invalid 'input[{n}].encrypted_content': the compaction item could "
                          "not be verified.", "input")
    return None


def _error(message: str, param: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                        "param": param, "code": None}}, status=400)


async def answer(fake: Fake, request: web.Request, body: dict[str, Any], as_chat: Any,
                 rec: Any) -> web.StreamResponse | None:
    """The fake's answer when the in-band compaction decides it (a refusal, or the compaction
    item for a trigger it serves); ``None``: the request goes on as any other."""
    if request.path != RESPONSES:
        return None
    refused = refusal(fake, body)
    if refused is not None:
        rec.refused = orjson.loads(refused.body)["error"]["message"]  # type: ignore[arg-type]
        return refused
    items = body.get("input")
    if not (isinstance(items, list) and items and isinstance(items[-1], dict)
            and items[-1].get("type") == TRIGGER):
        return None
    chat = as_chat(RESPONSES, expanded(body))
    output = [issue(fact_summarizer(chat))]
    prompt = fake.measure(chat)[0]
    usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": prompt + 8}
    rec.usage = usage
    if body.get("stream"):
        events = responses_events(body["model"], output, usage, fake.stream_chunks)
        return await fake._stream(request, events, None)
    return web.json_response(responses_object(body["model"], output, usage))
