"""The agents' in-band compaction on the Responses API (SPEC sections 2 and 11), its pure part:
Codex's "remote compaction v2" sends a request whose last input item is
``{"type": "compaction_trigger"}`` and wants exactly one ``compaction`` output item back, which
later requests carry in place of the history it covers.

Where the upstream does not serve the trigger the proxy makes that item itself
(``proxy.http.inband.trigger``). Its ``encrypted_content`` is ``cpx1.<payload>.<check>``: the
payload the summary's role and text as base64url JSON, the check the first 16 hex digits of its
SHA-256. The check guards against a damaged item, not a forged one, and holds no secret: a
forged item expands into a summary message whose text the client chose, which it could have
sent as a message anyway. ``expand`` turns each such item back into that summary message (the
shape a proxy compaction's summary has in this API) before the upstream sees the request, so
the upstream never receives an item it did not issue.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any

import orjson

TRIGGER = "compaction_trigger"
COMPACTION = "compaction"
VERSION = "cpx1"


def ends_in_trigger(body: dict[str, Any]) -> bool:
    """Whether ``body``'s last input item is a ``compaction_trigger``."""
    items = body.get("input")
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) \
        and items[-1].get("type") == TRIGGER


def _check(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def make_item(summary: str, role: str = "user") -> dict[str, Any]:
    """The proxy's ``compaction`` output item carrying ``summary`` (its message ``role``)."""
    raw = orjson.dumps({"role": role, "summary": summary})
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return {"type": COMPACTION, "id": "cmp_" + secrets.token_hex(16),
            "encrypted_content": f"{VERSION}.{payload}.{_check(payload)}"}


def proxy_summary(item: Any) -> tuple[str, str] | None:
    """(role, summary) of a ``compaction`` item the proxy made; ``None`` for any other item
    (one the upstream issued, or a damaged one, is not the proxy's to read)."""
    if not isinstance(item, dict) or item.get("type") != COMPACTION:
        return None
    blob = item.get("encrypted_content")
    if not isinstance(blob, str) or not blob.startswith(VERSION + "."):
        return None
    parts = blob.split(".")
    if len(parts) != 3 or _check(parts[1]) != parts[2]:
        return None
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), str):
        return None
    role = doc.get("role") if doc.get("role") in ("user", "developer", "system") else "user"
    return str(role), doc["summary"]


def expand(body: dict[str, Any], frame: Callable[[str], str]) -> dict[str, Any] | None:
    """``body`` with each proxy-made ``compaction`` item replaced by its summary message (a
    ``message`` item in the summary's role, the summary framed by ``frame``: as a proxy
    compaction frames it); ``None`` when it holds none (the body stays as it came)."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    out: list[Any] = []
    changed = False
    for item in items:
        found = proxy_summary(item)
        if found is None:
            out.append(item)
            continue
        changed = True
        role, summary = found
        out.append({"type": "message", "role": role, "content": frame(summary)})
    return {**body, "input": out} if changed else None


def refuses_trigger(status: int, error_body: bytes) -> bool:
    """Whether an upstream's error answer refuses the ``compaction_trigger`` item type (a 400
    that names it): an upstream without the feature."""
    return status == 400 and TRIGGER.encode() in error_body


def response_object(body: dict[str, Any], output: list[dict[str, Any]], rid: str,
                    status: str = "completed") -> dict[str, Any]:
    """A Responses ``response`` object answering ``body`` with ``output`` (no tokens billed:
    the usage is zero, the summary calls are the proxy's own)."""
    usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 0} if status == "completed" else None
    return {"id": rid, "object": "response", "created_at": int(time.time()), "status": status,
            "model": body.get("model"), "output": output, "usage": usage, "error": None,
            "incomplete_details": None, "instructions": body.get("instructions"),
            "store": False, "metadata": body.get("metadata") or {}}


def answer_events(body: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    """The streamed answer holding ``item``: ``response.created``, ``output_item.added`` and
    ``.done``, ``response.completed`` (as the API streams an output item of no deltas)."""
    rid = "resp_" + secrets.token_hex(16)
    return [
        {"type": "response.created", "sequence_number": 0,
         "response": response_object(body, [], rid, "in_progress")},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": item},
        {"type": "response.output_item.done", "sequence_number": 2, "output_index": 0,
         "item": item},
        {"type": "response.completed", "sequence_number": 3,
         "response": response_object(body, [item], rid)},
    ]


def sse(events: list[dict[str, Any]]) -> bytes:
    """``events`` as server-sent events (``event:`` the type, ``data:`` the JSON)."""
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
                    for e in events)
