"""The message lists of recent chat requests that passed the parser's checks
(``proxy.http.parse.check_chat``), so a client resending its history has only its new messages
checked."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class CheckedLists:
    """The message lists of recent requests that passed the checks, by their opening message.

    A request that repeats one of them and adds messages (a client resending its history) has
    only the added messages checked: the repeated ones passed before, and the list they form
    ended with every call answered, so the ordering check starts afresh after them. Knowing
    what repeats costs one comparison in C. Bounded by the bodies' total size."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024, max_lists: int = 20_000) -> None:
        self.max_bytes, self.max_lists = max_bytes, max_lists
        self._lists: OrderedDict[tuple[str, str], tuple[list[Any], int]] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _key(messages: list[Any]) -> tuple[str, str] | None:
        first = messages[0]
        if type(first) is dict and type(first.get("role")) is str and \
                type(first.get("content")) is str:
            return first["role"], first["content"]
        return None

    def repeated(self, messages: list[Any]) -> list[Any] | None:
        """The checked list that ``messages`` starts with, if any."""
        key = self._key(messages)
        found = self._lists.get(key) if key is not None else None
        if found is None:
            return None
        old = found[0]
        return old if len(old) <= len(messages) and messages[:len(old)] == old else None

    def remember(self, messages: list[Any], size: int) -> None:
        key = self._key(messages)
        if key is None:
            return
        old = self._lists.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._lists[key] = (messages, size)
        self._bytes += size
        while self._lists and (self._bytes > self.max_bytes or len(self._lists) > self.max_lists):
            self._bytes -= self._lists.popitem(last=False)[1][1]
