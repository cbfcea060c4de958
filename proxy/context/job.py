"""The values that travel along the managed path: the parsed request and the prepared job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from proxy.auth import Principal
from proxy.context.adapters import Adapted
from proxy.context.history import Known
from proxy.context.offload import Offload
from proxy.context.records.compactions import CompactionRecord
from proxy.context.report import ContextReport
from proxy.context.stages.scope import Scope
from proxy.policy.model import Policy


@dataclass(frozen=True, eq=False)
class ChatRequest:
    """A chat completion request that passed the shape and ordering checks. ``raw`` is the
    client's exact body, forwarded as it is when the proxy changes nothing. ``repeats``: an
    earlier request's checked message list whose first ``shared`` messages this one's starts
    with (``None``, 0: not known)."""

    raw: bytes
    body: dict[str, Any]
    messages: list[dict[str, Any]]
    model: str
    tools: list[Any] | None
    stream: bool
    repeats: list[Any] | None = None
    shared: int = 0
    adapted: Adapted | None = None  # another API's request, read for the stages

    def outgoing(self, report: ContextReport) -> bytes:
        """The body to send upstream for ``report``."""
        if report.messages is None:
            return self.raw
        if self.adapted is not None:
            return orjson.dumps(self.adapted.encode(report.messages))
        return orjson.dumps({**self.body, "messages": report.messages})


@dataclass(frozen=True, eq=False)
class Job:
    """One managed request, prepared: who asks, for which conversation, under which policy and
    window, and how its blocking work runs. A retry re-plans from the same job.

    ``policy`` is the resolved policy; ``scope.policy`` is that policy corrected by the
    conversation's usage ``ratio`` (what the stages plan with). ``known``: what the
    conversation's last request tells about this one. ``offload`` runs the plan (in a worker
    thread when new messages must be encoded at length); ``bulk`` runs work over the whole body,
    such as hashing a covered prefix (in a thread when the body is large). ``window_source``
    says where the scope's window came from (``X-Context-Window-Source``)."""

    principal: Principal
    request: ChatRequest
    conversation_id: str
    key: str
    policy: Policy
    scope: Scope
    ratio: float
    prior: CompactionRecord | None
    known: Known
    offload: Offload
    bulk: Offload
    force: bool = False
    kind: Literal["auto", "manual"] = "auto"
    window_source: str = "fallback"

    def reported(self, tokens: int) -> int:
        """An estimate as the client is shown it (headers, dividers): corrected by ``ratio``."""
        return round(tokens * self.ratio)

    def forced(self, window: int | None, source: str) -> Job:
        """The job again, compacting regardless of the trigger, against ``window``."""
        return replace(self, scope=self.scope.with_window(window), force=True,
                       window_source=source)
