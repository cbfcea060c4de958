"""What the proxy did to a request (``proxy.context.report.ContextReport``): its
``X-Context-*`` headers, and the SSE comment streamed first when a compaction ran."""

from __future__ import annotations

from proxy.context.records.compactions import CompactionRecord
from proxy.context.report import ContextReport

DIVIDER = CompactionRecord("div_1", "acme:t", 1, 0.0, "auto", "h", 12, (0,), "S", "m", 40,
                           9000, 2000, "compacted")


def report(**kw: object) -> ContextReport:
    base: dict[str, object] = dict(conversation_id="t", messages=None, tokens_before=9000,
                                   tokens_after=2000, estimate_after=1900, window=32000,
                                   masked=3, outcome="auto")
    return ContextReport(**{**base, **kw})  # type: ignore[arg-type]


def test_the_headers_say_what_was_done() -> None:
    h = report(prefix_kept=1500, window_source="upstream", divider=DIVIDER, retried="400",
               notes={"X-Context-Overhead-Ms": "1.00"}, summary_wait_ms=7).headers()
    assert h == {"X-Conversation-Id": "t", "X-Context-Tokens-Before": "9000",
                 "X-Context-Tokens-After": "2000", "X-Context-Window": "32000",
                 "X-Context-Window-Source": "upstream", "X-Context-Masked": "3",
                 "X-Context-Compaction": "auto", "X-Context-Prefix-Kept": "1500",
                 "X-Context-Summary-Wait-Ms": "7", "X-Context-Divider-Id": "div_1",
                 "X-Context-Retried": "400", "X-Context-Overhead-Ms": "1.00"}
    plain = report(outcome="none").headers()
    assert "X-Context-Divider-Id" not in plain and "X-Context-Retried" not in plain


def test_the_sse_comment_only_when_a_compaction_ran() -> None:
    assert report(divider=DIVIDER).sse_comment() == (
        b": context-compacted kind=auto divider=div_1 tokens_before=9000 "
        b"tokens_after=2000\n\n")
    assert report(divider=DIVIDER, outcome="reused").sse_comment() == b""
    assert report().sse_comment() == b""
