"""Per conversation, what its last request looked like, so the next one counts only what is new.

Clients resend the whole history every turn. Comparing the new message list with the last one
(C-level comparisons up to the first difference, no hashing) tells how many leading
messages are unchanged (all but the last one when a client changes only its last message);
their token counts are taken over and only the rest go
through the token counter, and only a large rest is worth a worker thread. When the last request
had checked the stored compaction's prefix hash against the same leading messages, the check is
not repeated.

Bounded by the total size of the request bodies remembered (least recently used go first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.checked import common_prefix
from proxy.context.recent import Recent
from proxy.context.tokens.counter import TokenCounter

Pair = tuple[int, int]  # (tokens of the message, tokens of its content alone)

MAX_BYTES = 256 * 1024 * 1024
MAX_CONVERSATIONS = 20_000


@dataclass(frozen=True)
class Known:
    """What the conversation's last request tells about this one: how many leading messages are
    unchanged, their counts, and the (prefix hash, covered) it verified against them
    (``None``: none)."""

    unchanged: int
    pairs: list[Pair]
    verified: tuple[str, int] | None

    def pairs_for(self, counter: TokenCounter, messages: Sequence[Mapping[str, Any]],
                  model: str) -> list[Pair]:
        """Counts of every message of ``messages``: the unchanged ones taken over, the rest
        counted (blocking when the new messages are large: run it where the service says)."""
        fresh = counter.token_pairs(messages[self.unchanged:], model)
        return self.pairs + fresh if self.unchanged else fresh


NOTHING = Known(0, [], None)


@dataclass(frozen=True)
class _Last:
    model: str
    messages: Sequence[Mapping[str, Any]]
    pairs: list[Pair]
    verified: tuple[str, int] | None


class History:
    """Thread-safe: the service plans in worker threads for large requests."""

    def __init__(self, counter: TokenCounter, max_bytes: int = MAX_BYTES) -> None:
        self.counter = counter
        self._last: Recent[str, _Last] = Recent(max_bytes, MAX_CONVERSATIONS)

    def recall(self, key: str, messages: Sequence[Mapping[str, Any]], model: str,
               repeats: Sequence[Mapping[str, Any]] | None = None, shared: int = -1) -> Known:
        """Compare ``messages`` with the conversation's last request (no counting: comparisons
        in C up to the first difference); the leading messages they share are unchanged.
        ``repeats``: a list whose first ``shared`` messages ``messages`` is known to start with
        (-1: all of it); when it is that last request's own list, the comparison is spared."""
        last = self._last.get(key)
        if last is None or last.model != model:
            return NOTHING
        if last.messages is repeats:
            n = len(repeats) if shared < 0 else min(shared, len(repeats))
        else:
            n = common_prefix(messages, last.messages)
        if not n:
            return NOTHING
        verified = last.verified if last.verified is not None and last.verified[1] <= n \
            else None
        return Known(n, last.pairs[:n], verified)

    def verify(self, key: str, verified: tuple[str, int]) -> None:
        """Record that the last request's first ``verified[1]`` messages hash to
        ``verified[0]`` (a compaction was just made of them)."""
        def mark(last: _Last) -> _Last:
            return replace(last, verified=verified) if verified[1] <= len(last.messages) else last

        self._last.update(key, mark)

    def remember(self, key: str, messages: Sequence[Mapping[str, Any]], model: str,
                 pairs: list[Pair], verified: tuple[str, int] | None, size: int) -> None:
        """Keep this request as the conversation's last (``size``: its body's length)."""
        self._last.put(key, _Last(model, messages, pairs, verified), size)
