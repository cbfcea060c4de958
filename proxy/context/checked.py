"""The message lists of recent chat requests that passed the parser's checks
(``proxy.http.parse.check_chat``), so a client resending its history has only its new messages
checked, and ``common_prefix``, how many leading messages two lists share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.context.recent import Recent

# How many opening messages name a list (up to and including the first user message): agents
# share a system prompt, so the first message alone would make their conversations evict
# each other.
KEY_MESSAGES = 4


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The number of leading items ``a`` and ``b`` share (equal values, compared in C).

    The usual cases cost one slice comparison: one list extends the other, or only the last
    shared item differs (a client that changes its last message); anything else is searched
    item by item."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    end = n if a[n - 1] == b[n - 1] else n - 1
    if a[:end] == b[:end]:
        return end
    for i in range(end):
        if a[i] != b[i]:
            return i
    return end  # pragma: no cover - the slices differed, so some item does


def restart_point(messages: Sequence[Any], shared: int) -> int:
    """Where the ordering check can start afresh within the first ``shared`` messages of a
    list that passed it: after the last message that neither is a tool result nor makes tool
    calls (after it, no call was open, since the list passed)."""
    j = shared
    while j > 0:
        m = messages[j - 1]
        if m.get("role") != "tool" and not (m.get("role") == "assistant" and
                                             m.get("tool_calls") is not None):
            break
        j -= 1
    return j


class CheckedLists:
    """The message lists of recent requests that passed the checks, by their opening messages.

    A request that shares leading messages with one of them (a client resending its history,
    or changing only its last message) has only the rest checked: the shared ones passed
    before, and the ordering check starts afresh after the last shared message at which no
    call was open (``restart_point``). Knowing what repeats costs a comparison in C, and for a
    body byte for byte the same as the one the list came from (a retry), a comparison of the
    bytes. Bounded by the bodies' total size."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024, max_lists: int = 20_000) -> None:
        self._lists: Recent[tuple[str, ...], tuple[list[Any], bytes]] = Recent(max_bytes,
                                                                             max_lists)

    @staticmethod
    def key(messages: list[Any]) -> tuple[str, ...] | None:
        """What names a list: its opening messages (None: they are not plain text)."""
        key: list[str] = []
        for m in messages[:KEY_MESSAGES]:
            if type(m) is not dict or type(m.get("role")) is not str or \
                    type(m.get("content")) is not str:
                return None
            key += (m["role"], m["content"])
            if m["role"] == "user":
                break
        return tuple(key)

    def shared(self, messages: list[Any], raw: bytes | None = None,
               key: tuple[str, ...] | None = None) -> tuple[list[Any] | None, int]:
        """(the checked list ``messages`` shares leading messages with, how many) or
        ``(None, 0)``. ``raw``: the body ``messages`` was parsed from; ``key``: ``key(messages)``
        when the caller has it."""
        key = key if key is not None else self.key(messages)
        found = self._lists.get(key) if key is not None else None
        if found is None:
            return None, 0
        old = found[0]
        if raw is not None and raw == found[1] and len(messages) == len(old):
            return old, len(old)  # the same bytes parse to the same list
        n = common_prefix(messages, old)
        return (old, n) if n else (None, 0)

    def repeated(self, messages: list[Any]) -> list[Any] | None:
        """The checked list that ``messages`` starts with, if any."""
        old, n = self.shared(messages)
        return old if old is not None and n == len(old) else None

    def remember(self, messages: list[Any], raw: bytes,
                 key: tuple[str, ...] | None = None) -> None:
        """Keep ``messages`` (parsed from ``raw``) as its conversation's checked list."""
        key = key if key is not None else self.key(messages)
        if key is not None:
            self._lists.put(key, (messages, raw), len(raw))
