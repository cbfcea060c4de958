"""The manual compaction gate ("Summarize now", SPEC section 6): the deployment switch and the
eligibility floor, shared by ``POST /v1/conversations/{id}/compact`` and the
``X-Context-Compact: now`` request header."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import ApiError, bad_request

HEADER = "X-Context-Compact"


def require_enabled(enabled: bool) -> None:
    """Refuse manual compaction (403) unless the deployment enables it."""
    if not enabled:
        raise ApiError(403, "Manual compaction is disabled on this deployment "
                       "(CONTEXT_PROXY_MANUAL_COMPACTION).", code="manual_compaction_disabled")


def require_assistant_turn(messages: Sequence[Mapping[str, Any]]) -> None:
    """The eligibility floor: at least one prior assistant turn (409 otherwise)."""
    if not any(m.get("role") == "assistant" for m in messages):
        raise ApiError(409, "Nothing to compact yet: the conversation has no assistant turn.",
                       code="nothing_to_compact")


def requested(header: str | None, enabled: bool, messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a chat request asks for a manual compaction (``X-Context-Compact: now``); a
    request that asks on a deployment without it, or below the floor, is refused."""
    value = (header or "").strip().lower()
    if not value:
        return False
    if value != "now":
        raise bad_request(f"'{HEADER}' accepts only 'now'.", param=HEADER)
    require_enabled(enabled)
    require_assistant_turn(messages)
    return True
