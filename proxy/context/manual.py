"""The manual compaction gate ("Summarize now", SPEC section 6): the deployment switch and the
eligibility floor, shared by ``POST /v1/conversations/{id}/compact`` and the
``X-Context-Compact: now`` request header."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.context.report import ContextReport
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


IGNORED = "X-Context-Compact-Ignored"


def requested(header: str | None, enabled: bool, messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a chat request asks for a manual compaction (``X-Context-Compact: now``). On a
    deployment without manual compaction the hint is ignored (see ``ignored``); below the floor
    the request is refused (409), and a value other than ``now`` is a 400."""
    value = (header or "").strip().lower()
    if not value:
        return False
    if value != "now":
        raise bad_request(f"'{HEADER}' accepts only 'now'.", param=HEADER)
    if not enabled:
        return False
    require_assistant_turn(messages)
    return True


def ignored(header: str | None, enabled: bool) -> dict[str, str]:
    """The header that tells a client its compaction hint was ignored (the deployment has no
    manual compaction), or none."""
    if enabled or (header or "").strip().lower() != "now":
        return {}
    return {IGNORED: "manual compaction is disabled on this deployment"}


def noted(report: ContextReport, header: str | None, enabled: bool) -> ContextReport:
    """``report`` with the ``ignored`` note (``header``: the request's ``X-Context-Compact``)
    merged into its other notes, which stay; ``report`` itself when there is none. Every
    managed route notes the hint this way."""
    hint = ignored(header, enabled)
    return replace(report, notes={**report.notes, **hint}) if hint else report
