"""What the proxy reads from upstream answers: a chat stream's usage (the one scanner,
``proxy.apis.calls.ApiUsageScanner``, fed as ``EventCheck`` feeds it), a chat answer's cached
tokens (``proxy.apis.chat_completions.usage``) and the window a context-length refusal states
(``proxy.upstream.usage``)."""

from __future__ import annotations

from proxy.apis import chat_completions
from proxy.apis.calls import ApiUsageScanner
from proxy.upstream.answers import EventCheck
from proxy.upstream.usage import UpstreamUsage, stated_window

CHAT = chat_completions.API


def _scanned(*chunks: bytes) -> UpstreamUsage:
    """The usage of a chat stream arriving in ``chunks``, read as ``forward`` reads it."""
    scanner = ApiUsageScanner(CHAT)
    check = EventCheck(on_line=scanner.line, only=scanner.marker, terminal=CHAT.stream_end)
    for chunk in chunks:
        check.feed(chunk)
    check.flush()
    return scanner.usage


def test_usage_scanner_finds_usage_split_across_chunks() -> None:
    stream = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5}}\n\n'
              b"data: [DONE]\n\n")
    for cut in range(1, len(stream)):
        assert _scanned(stream[:cut], stream[cut:]).prompt == 1234, cut


def test_stated_window() -> None:
    body = (b'{"error": {"message": "This model\'s maximum context length is 128,000 tokens. '
            b'However, your messages resulted in 130000 tokens."}}')
    assert stated_window(body) == 128_000
    assert stated_window(b'{"error": {"message": "prompt is too long"}}') is None


def test_cached_tokens_are_read_whole_and_streamed() -> None:
    whole = (b'{"usage":{"prompt_tokens":5000,"completion_tokens":9,'
             b'"prompt_tokens_details":{"cached_tokens":4096}}}')
    assert chat_completions.usage(whole) == UpstreamUsage(5000, 4096, 0, 9)
    assert chat_completions.usage(b'{"usage":{"prompt_tokens":5}}').cached == 0
    assert chat_completions.usage(
        b'{"usage":{"prompt_tokens":5,"cache_read_input_tokens":77}}').cached == 77
    stream = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":5000,'
              b'"prompt_tokens_details":{"cached_tokens":4096}}}\n\ndata: [DONE]\n\n')
    for cut in range(1, len(stream), 7):
        usage = _scanned(stream[:cut], stream[cut:])
        assert (usage.prompt, usage.cached) == (5000, 4096), cut
