"""What the proxy did to one request, built once: the ``X-Context-*`` headers and the SSE comment
(SPEC section 6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from proxy.context.records.compactions import CompactionRecord

if TYPE_CHECKING:
    from proxy.context.shadow import ShadowFigures

Outcome = Literal["none", "auto", "manual", "reused", "failed", "insufficient"]


@dataclass(frozen=True)
class ContextReport:
    """``messages`` is the list to forward, or ``None`` to forward the client's exact bytes.

    ``tokens_before``/``tokens_after`` are corrected by the conversation's usage ratio;
    ``estimate_after`` is the uncorrected estimate of what is sent (what the next usage
    correction compares the upstream's count with). ``window`` is the compaction window.
    ``prefix_kept``: tokens at the start of what is sent that the conversation's previous
    request sent the same (what a provider's prompt cache can serve). ``window_source``: where
    ``window`` came from: ``policy``, ``upstream`` (its ``/v1/models``), ``litellm``,
    ``learned`` (a limit the upstream stated when it refused a request) or ``fallback``.
    """

    conversation_id: str
    messages: list[dict[str, Any]] | None
    tokens_before: int
    tokens_after: int
    estimate_after: int
    window: int
    masked: int
    outcome: Outcome
    prefix_kept: int = 0
    divider: CompactionRecord | None = None
    retried: str | None = None
    notes: Mapping[str, str] = field(default_factory=dict)  # further headers, as they are
    window_source: str = "fallback"
    summary_wait_ms: int = 0  # how long the request waited for a summary (0: it did not)
    reasoning_removed: int = 0  # turns whose bound reasoning this request's compaction removed
    drop_changed: bool = False  # bound reasoning follows a change masking made: ask the
    # provider to drop it rather than refuse the request (``Api.binding_controls``)
    shadow: ShadowFigures | None = None  # shadow mode: what the proxy would have done

    def headers(self) -> dict[str, str]:
        h = {"X-Conversation-Id": self.conversation_id,
             "X-Context-Tokens-Before": str(self.tokens_before),
             "X-Context-Tokens-After": str(self.tokens_after),
             "X-Context-Window": str(self.window),
             "X-Context-Window-Source": self.window_source,
             "X-Context-Masked": str(self.masked),
             "X-Context-Compaction": self.outcome,
             "X-Context-Prefix-Kept": str(self.prefix_kept),
             "X-Context-Summary-Wait-Ms": str(self.summary_wait_ms)}
        if self.divider is not None:
            h["X-Context-Divider-Id"] = self.divider.id
        if self.retried:
            h["X-Context-Retried"] = self.retried
        if self.reasoning_removed:
            h["X-Context-Reasoning-Removed"] = str(self.reasoning_removed)
        if self.shadow is not None:
            h.update(self.shadow.headers())
        h.update(self.notes)
        return h

    def sse_comment(self) -> bytes:
        """The SSE comment line streamed first when a compaction ran (parsers ignore it)."""
        if self.divider is None or self.outcome not in ("auto", "manual"):
            return b""
        return (f": context-compacted kind={self.outcome} divider={self.divider.id} "
                f"tokens_before={self.tokens_before} tokens_after={self.tokens_after}\n\n"
                ).encode()
