"""What the proxy reads from upstream answers (``proxy.upstream.usage``): streamed usage and
the window a context-length refusal states."""

from __future__ import annotations

from proxy.upstream.usage import UsageScanner, stated_window


def test_usage_scanner_finds_usage_split_across_chunks() -> None:
    stream = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5}}\n\n'
              b"data: [DONE]\n\n")
    for cut in range(1, len(stream)):
        scanner = UsageScanner()
        scanner.feed(stream[:cut])
        scanner.feed(stream[cut:])
        assert scanner.usage.prompt == 1234, cut


def test_stated_window() -> None:
    body = (b'{"error": {"message": "This model\'s maximum context length is 128,000 tokens. '
            b'However, your messages resulted in 130000 tokens."}}')
    assert stated_window(body) == 128_000
    assert stated_window(b'{"error": {"message": "prompt is too long"}}') is None


def test_cached_tokens_are_read_whole_and_streamed() -> None:
    from proxy.upstream.usage import UsageScanner, cached_tokens_of

    whole = (b'{"usage":{"prompt_tokens":5000,"completion_tokens":9,'
             b'"prompt_tokens_details":{"cached_tokens":4096}}}')
    assert cached_tokens_of(whole) == 4096
    assert cached_tokens_of(b'{"usage":{"prompt_tokens":5}}') == 0
    assert cached_tokens_of(b'{"usage":{"input_tokens":5,"cache_read_input_tokens":77}}') == 77
    stream = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":5000,'
              b'"prompt_tokens_details":{"cached_tokens":4096}}}\n\ndata: [DONE]\n\n')
    for cut in range(1, len(stream), 7):
        scanner = UsageScanner()
        scanner.feed(stream[:cut])
        scanner.feed(stream[cut:])
        assert (scanner.usage.prompt, scanner.usage.cached) == (5000, 4096), cut
