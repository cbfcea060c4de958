"""A least-recently-stored cache bounded by the total size of what it holds: the one kind of
memory the parser's checked lists (``proxy.context.checked``) and each conversation's last
request (``proxy.context.history``) keep, so both are bounded and evicted the same way."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """Values by key, each with its size in bytes (a request body's length).

    Storing a key makes it the newest; reading does not (a hot path must not reorder). When the
    sizes add up to more than ``max_bytes``, or there are more than ``max_items``, the oldest
    go first. Thread-safe: the service plans large requests in worker threads."""

    def __init__(self, max_bytes: int, max_items: int) -> None:
        self.max_bytes, self.max_items = max_bytes, max_items
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        found = self._items.get(key)  # one dict read: atomic under the GIL, no lock needed
        return None if found is None else found[0]

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._items and (self._bytes > self.max_bytes or
                                   len(self._items) > self.max_items):
                self._bytes -= self._items.popitem(last=False)[1][1]

    def update(self, key: K, change: Callable[[V], V]) -> None:
        """The value of a key still held becomes ``change(value)``, its size and place kept
        (absent: nothing), under the lock, so a newer ``put`` is never overwritten."""
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._items[key] = (change(old[0]), old[1])

    @property
    def size(self) -> int:
        """The total size of what is held, in bytes."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
