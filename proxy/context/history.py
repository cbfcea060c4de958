"""Per conversation, what its last request looked like, so the next one counts only what is new.

Clients resend the whole history every turn. Comparing the new message list with the last one
(a C-level walk that stops at the first difference, no hashing, no allocation per message) tells
how many leading messages are unchanged; their token counts are taken over and only the rest go
through the token counter. When the last request had checked the stored compaction's prefix
hash against the same leading messages, the check is not repeated.

Bounded by the total size of the request bodies remembered (least recently used go first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.tokens import TokenCounter

Pair = tuple[int, int]  # (tokens of the message, tokens of its content alone)

MAX_BYTES = 256 * 1024 * 1024
MAX_CONVERSATIONS = 20_000


@dataclass(frozen=True)
class Recalled:
    """Per-message counts aligned with the new list, how many leading messages equal the last
    request's, and the (prefix hash, covered) the last request verified (``None``: none)."""

    pairs: list[Pair]
    unchanged: int
    verified: tuple[str, int] | None


@dataclass(frozen=True)
class _Last:
    model: str
    messages: Sequence[Mapping[str, Any]]
    pairs: list[Pair]
    verified: tuple[str, int] | None
    size: int


class History:
    """Thread-safe: the service plans in worker threads for large requests."""

    def __init__(self, counter: TokenCounter, max_bytes: int = MAX_BYTES) -> None:
        self.counter = counter
        self.max_bytes = max_bytes
        self._last: OrderedDict[str, _Last] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def recall(self, key: str, messages: Sequence[Mapping[str, Any]], model: str) -> Recalled:
        """The counts of ``messages`` (see ``Recalled``), encoding only messages not seen in
        the conversation's last request or in the counter's cache."""
        with self._lock:
            last = self._last.get(key)
        unchanged = 0
        if last is not None and last.model == model:
            n = min(len(last.messages), len(messages))
            if messages[:n] == last.messages[:n]:
                unchanged = n
        fresh = self.counter.token_pairs(messages[unchanged:], model)
        pairs = last.pairs[:unchanged] + fresh if last is not None and unchanged else fresh
        verified = last.verified if last is not None and last.verified is not None and \
            last.verified[1] <= unchanged else None
        return Recalled(pairs, unchanged, verified)

    def remember(self, key: str, messages: Sequence[Mapping[str, Any]], model: str,
                 pairs: list[Pair], verified: tuple[str, int] | None, size: int) -> None:
        """Keep this request as the conversation's last (``size``: its body's length)."""
        entry = _Last(model, messages, pairs, verified, size)
        with self._lock:
            old = self._last.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            self._last[key] = entry
            self._bytes += size
            while self._last and (self._bytes > self.max_bytes or
                                  len(self._last) > MAX_CONVERSATIONS):
                _, dropped = self._last.popitem(last=False)
                self._bytes -= dropped.size
