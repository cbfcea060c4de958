"""What the proxy reads from an upstream answer, whatever the API: the ``UpstreamUsage`` it
reports (each API's ``usage`` function in ``proxy.apis`` fills it; one scanner reads a stream's,
``proxy.apis.calls.ApiUsageScanner``), the reasoning it dropped and a context-length refusal.

Patterns, not JSON parses: they run on every answer and every usage line of a stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def is_overflow(status: int, body: bytes) -> bool:
    """Whether an error answer refuses the request for exceeding the context length."""
    return status in (400, 413, 422) and any(m in body.decode("utf-8", "replace").lower()
                                            for m in _OVERFLOW_MARKERS)


def stated_window(body: bytes) -> int | None:
    """The limit an upstream states in its refusal ("maximum context length is 32768 tokens")."""
    found = _STATED_LIMIT.search(body.decode("utf-8", "replace"))
    return int(found.group(1).replace(",", "")) if found else None
