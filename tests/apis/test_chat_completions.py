"""Chat completions' usage (``proxy.apis.chat_completions.usage``), whole and streamed: a chat
stream is read by the one scanner every API's stream goes through
(``proxy.apis.calls.ApiUsageScanner``), by the same rules."""

from __future__ import annotations

from proxy.apis import chat_completions
from proxy.apis.calls import ApiUsageScanner
from proxy.upstream.usage import UpstreamUsage


def test_a_chat_answers_usage_reads_its_cache_figures() -> None:
    body = (b'{"usage": {"prompt_tokens": 900, "completion_tokens": 9, "prompt_tokens_details": '
            b'{"cached_tokens": 512, "cache_write_tokens": 128}}}')
    assert chat_completions.usage(body) == UpstreamUsage(900, 512, 128, 9)
    assert chat_completions.usage(b'{"choices": []}') == UpstreamUsage()


def test_a_chat_streams_usage_is_read_by_the_same_rules() -> None:
    """A chat stream whose later chunk reports a smaller usage (a partial figure after the
    whole one): the largest prompt wins with its own cache figures and the output is the
    largest; never the later prompt with the earlier line's cached tokens (more cached than
    sent), as chat completions' own scanner read it."""
    scanner = ApiUsageScanner(chat_completions.API)
    assert scanner.marker == b'"prompt_tokens"'
    for line in (b'data: {"choices": [{"delta": {"content": "hi"}}]}',
                 b'data: {"choices": [], "usage": {"prompt_tokens": 5000, "completion_tokens": '
                 b'42, "prompt_tokens_details": {"cached_tokens": 4096}}}',
                 b'data: {"choices": [], "usage": {"prompt_tokens": 12, '
                 b'"completion_tokens": 7}}',
                 b"data: [DONE]"):
        scanner.line(line)
    assert scanner.usage == UpstreamUsage(5000, 4096, 0, 42)
