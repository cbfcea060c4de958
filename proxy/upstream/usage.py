"""What the proxy reads from an upstream answer: the usage figures and a context-length refusal.

Patterns, not JSON parses: they run on every answer, and a stream is scanned line by line while
it is relayed, holding at most one partial line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
# OpenAI's usage.prompt_tokens_details.cached_tokens, or Anthropic-style cache reads.
_CACHED_TOKENS = re.compile(rb'"(?:cached_tokens|cache_read_input_tokens)"\s*:\s*([0-9]+)')
# OpenAI's newest models: prompt_tokens_details.cache_write_tokens; Anthropic-style writes.
_WRITTEN_TOKENS = re.compile(
    rb'"(?:cache_write_tokens|cache_creation_input_tokens)"\s*:\s*([0-9]+)')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*([0-9]+)')
_STATED_LIMIT = re.compile(r"maximum context length is ([0-9][0-9,]*) tokens", re.IGNORECASE)
_OVERFLOW_MARKERS = ("context_length_exceeded", "maximum context length", "context length",
                     "too many tokens", "prompt is too long", "input is too long")


@dataclass(frozen=True)
class UpstreamUsage:
    """What the upstream reported for one call: ``prompt`` tokens (cache reads and writes
    included, whatever the API's own field leaves out), of them ``cached`` (read from the prompt
    cache) and ``written`` (stored in it by this call), and the ``output`` tokens."""

    prompt: int = 0
    cached: int = 0
    written: int = 0
    output: int = 0
    dropped: int = 0  # reasoning the upstream dropped (its answer's ``input_transformations``)


_TRANSFORMATIONS = b'"input_transformations"'
_MISMATCH = re.compile(rb'"prefix_mismatch')


def dropped_reasoning(data: bytes) -> int:
    """How many blocks or items an answer (or one of its events) says the provider dropped
    because their prefix changed: the ``prefix_mismatch`` entries of its
    ``input_transformations``."""
    at = data.find(_TRANSFORMATIONS)
    return 0 if at < 0 else len(_MISMATCH.findall(data, at))


def _first(pattern: re.Pattern[bytes], body: bytes) -> int:
    found = pattern.search(body)
    return int(found.group(1)) if found else 0


def chat_usage(body: bytes) -> UpstreamUsage:
    """The usage of a chat completion body (or of one stream chunk)."""
    return UpstreamUsage(_first(_PROMPT_TOKENS, body), _first(_CACHED_TOKENS, body),
                         _first(_WRITTEN_TOKENS, body), _first(_COMPLETION_TOKENS, body))


def prompt_tokens_of(body: bytes) -> int:
    """``usage.prompt_tokens`` of a chat completion body (0 when absent)."""
    found = _PROMPT_TOKENS.search(body)
    return int(found.group(1)) if found else 0


def cached_tokens_of(body: bytes) -> int:
    """The prompt tokens an answer says were served from the provider's cache (0: none)."""
    found = _CACHED_TOKENS.search(body)
    return int(found.group(1)) if found else 0


class UsageScanner:
    """Finds ``usage.prompt_tokens`` and the cached tokens in an SSE stream fed chunk by chunk
    (``feed``) or line by line (``line``)."""

    MAX_LINE = 1 << 20
    marker = b'"prompt_tokens"'  # a line without it says nothing about usage

    def __init__(self) -> None:
        self.usage = UpstreamUsage()
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.MAX_LINE:
            self._partial = b""
        for line in lines:
            self.line(line)

    def line(self, line: bytes) -> None:
        """One complete SSE line, without its line break (``EventCheck`` calls this)."""
        if line.startswith(b"data:") and self.marker in line:
            got, was = chat_usage(line[5:].strip()), self.usage
            self.usage = UpstreamUsage(got.prompt or was.prompt, got.cached or was.cached,
                                       got.written or was.written, got.output or was.output)


def is_overflow(status: int, body: bytes) -> bool:
    """Whether an error answer refuses the request for exceeding the context length."""
    return status in (400, 413, 422) and any(m in body.decode("utf-8", "replace").lower()
                                            for m in _OVERFLOW_MARKERS)


def stated_window(body: bytes) -> int | None:
    """The limit an upstream states in its refusal ("maximum context length is 32768 tokens")."""
    found = _STATED_LIMIT.search(body.decode("utf-8", "replace"))
    return int(found.group(1).replace(",", "")) if found else None
