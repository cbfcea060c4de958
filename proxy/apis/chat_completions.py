"""OpenAI's chat completions (``POST /v1/chat/completions``): the stages' own shape, so no
adapter; a whole answer must be a chat completion (``proxy.upstream.answers``), its usage is
``usage.prompt_tokens``, ``prompt_tokens_details.cached_tokens`` and ``cache_write_tokens``,
``completion_tokens`` (``usage``, read off a whole answer and, by the one scanner every API's
stream goes through, ``proxy.apis.calls.ApiUsageScanner``, off a stream's chunks). Its summary
calls are chat completions (``proxy.context.summary.summarizer``)."""

from __future__ import annotations

import re

from proxy.apis.api import Api, first_int, openai_headers
from proxy.upstream.usage import UpstreamUsage

_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
# OpenAI's usage.prompt_tokens_details.cached_tokens, or Anthropic-style cache reads.
_CACHED = re.compile(rb'"(?:cached_tokens|cache_read_input_tokens)"\s*:\s*([0-9]+)')
# OpenAI's newest models: prompt_tokens_details.cache_write_tokens; Anthropic-style writes.
_WRITTEN = re.compile(rb'"(?:cache_write_tokens|cache_creation_input_tokens)"\s*:\s*([0-9]+)')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*([0-9]+)')


def usage(data: bytes) -> UpstreamUsage:
    """The usage of a chat completion body or of one stream chunk's data (0: not reported)."""
    return UpstreamUsage(first_int(_PROMPT, data), first_int(_CACHED, data),
                         first_int(_WRITTEN, data), first_int(_COMPLETION, data))


API = Api(name="chat", route="/v1/chat/completions", path="/chat/completions",
          headers=openai_headers, usage=usage, usage_marker=b'"prompt_tokens"',
          stream_end=(b"[DONE]",))
