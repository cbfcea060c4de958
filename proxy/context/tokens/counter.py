"""Token accounting (SPEC section 3): a per-process counter with a per-message cache.

The formula and the model-to-encoding mapping are in ``proxy.context.tokens.formula`` (cookbook
overhead, tool calls, tools schemas, images; unknown models count with cl100k_base). This module
adds the bounded, thread-safe cache keyed by encoding and ``cache_key`` (a hash of the fields a
message's count depends on), so counting a new turn encodes only its new messages.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from proxy.context.tokens.formula import (
    DEFAULT_ENCODING,
    PER_TOOL_SCHEMA,
    REPLY_PRIMING,
    TOOLS_PREAMBLE,
    approx_chars,
    cache_key,
    count_text,
    encode_message,
    encoding_name_for,
)

# Content above this many characters is counted off the event loop.
OFFLOAD_CHARS = 64_000
Message = Mapping[str, Any]


class TokenCounter:
    """Counts tokens of messages with a bounded per-message LRU cache; one per process.

    Thread-safe: the cache is guarded by a lock held only for lookups and inserts, never while
    encoding, so counts running in executor threads do not serialize each other or the loop.
    ``encoded_messages`` counts the messages that were actually encoded (cache misses).
    """

    def __init__(self, max_entries: int = 100_000, offload_chars: int = OFFLOAD_CHARS) -> None:
        self.max_entries = max_entries
        self.offload_chars = offload_chars
        self.encoded_messages = 0
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, Any], tuple[int, int]] = OrderedDict()
        self._last_tools: tuple[str, Any, int] | None = None
        self._encodings: dict[str, tiktoken.Encoding] = {}
        self._model_encoding: dict[str, str] = {}

    # encodings

    def encoding_name(self, model: str) -> str:
        name = self._model_encoding.get(model)
        if name is None:
            if len(self._model_encoding) > 4096:  # model names come from clients: stay bounded
                self._model_encoding.clear()
            name = self._model_encoding[model] = encoding_name_for(model)
        return name

    def encoding(self, model: str) -> tiktoken.Encoding:
        """The model's encoding, loaded on first use (slow: the service offloads a request whose
        encoding is not loaded yet)."""
        name = self.encoding_name(model)
        enc = self._encodings.get(name)
        if enc is None:
            with self._load_lock:
                enc = self._encodings.get(name)
                if enc is None:
                    try:
                        enc = tiktoken.get_encoding(name)
                    except Exception:  # rank file missing: count with the default instead
                        enc = tiktoken.get_encoding(DEFAULT_ENCODING)
                    self._encodings[name] = enc
        return enc

    def preload(self, models: Sequence[str]) -> None:
        """Load the encodings of ``models`` now (blocking: at start-up, in a thread), so that
        no request waits for one: loading one is a quarter to half a second of CPU."""
        for model in models:
            self.encoding(model)

    def is_loaded(self, model: str) -> bool:
        return self.encoding_name(model) in self._encodings

    # counting

    def text_tokens(self, text: str, model: str) -> int:
        """Tokens of plain ``text`` (no message overhead); not cached."""
        return count_text(self.encoding(model), text)

    def message_tokens(self, message: Message, model: str) -> int:
        """Tokens of one message, overhead included (cached)."""
        return self._entries([message], model)[0][0]

    def content_tokens(self, message: Message, model: str) -> int:
        """Tokens of the message's ``content`` alone (cached with the message)."""
        return self._entries([message], model)[0][1]

    def message_token_list(self, messages: Sequence[Message], model: str) -> list[int]:
        """Per-message token counts, overhead included, aligned with ``messages``."""
        return [t for t, _ in self._entries(messages, model)]

    def token_pairs(self, messages: Sequence[Message], model: str) -> list[tuple[int, int]]:
        """Per-message (total tokens, content tokens), aligned with ``messages``."""
        return self._entries(messages, model)

    def tools_tokens(self, tools: Sequence[Any] | None, model: str) -> int:
        """Tokens the request's ``tools`` schemas add to the prompt (0 when there are none)."""
        if not tools:
            return 0
        name = self.encoding_name(model)
        last = self._last_tools
        if last is not None and last[0] == name and last[1] == tools:
            return last[2]  # agents resend the same tools every turn: equality beats hashing
        doc = {"role": "tools", "content": [{"type": "tool", "schema": t} for t in tools]}
        key = (name, cache_key(doc))
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            self._last_tools = (name, tools, hit[0])
            return hit[0]
        enc = self.encoding(model)
        n = TOOLS_PREAMBLE
        for tool in tools:
            body = tool.get("function", tool) if isinstance(tool, Mapping) else tool
            text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, default=str)
            n += PER_TOOL_SCHEMA + count_text(enc, text)
        self._store([(key, (n, n))], messages=False)
        self._last_tools = (name, tools, n)
        return n

    def count_messages(
        self, messages: Sequence[Message], model: str, tools: Sequence[Any] | None = None
    ) -> int:
        """Prompt tokens of a request: every message, the reply priming and the tools schemas."""
        return sum(self.message_token_list(messages, model)) + self.overhead(model, tools)

    def overhead(self, model: str, tools: Sequence[Any] | None = None) -> int:
        """What a request costs beyond its messages: reply priming plus the tools schemas."""
        return REPLY_PRIMING + self.tools_tokens(tools, model)

    def needs_offload(self, messages: Sequence[Message], model: str,
                      size: int | None = None) -> bool:
        """Whether counting ``messages`` could block for long: encoding not loaded or big input.

        Judged by size alone (cheap), so a large but cached transcript also goes to a thread;
        hashing megabytes is itself worth keeping off the loop. ``size`` (e.g. the request
        body's length, when known) spares measuring the messages.
        """
        if not self.is_loaded(model):
            return True
        return (size if size is not None else approx_chars(messages)) > self.offload_chars

    # text surgery for the summarizer

    def split_text(self, text: str, model: str, max_tokens: int) -> list[str]:
        """``text`` cut into consecutive pieces of at most ``max_tokens`` tokens each."""
        enc = self.encoding(model)
        ids = enc.encode_ordinary(text)
        step = max(1, max_tokens)
        return [enc.decode(ids[i : i + step]) for i in range(0, len(ids), step)] or [""]

    def truncate_text(self, text: str, model: str, max_tokens: int) -> str:
        """``text`` cut to its first ``max_tokens`` tokens."""
        enc = self.encoding(model)
        ids = enc.encode_ordinary(text)
        return text if len(ids) <= max_tokens else enc.decode(ids[: max(0, max_tokens)])

    # cache internals

    def _entries(self, messages: Sequence[Message], model: str) -> list[tuple[int, int]]:
        name = self.encoding_name(model)
        keys = [(name, cache_key(m)) for m in messages]
        out: list[tuple[int, int] | None] = [None] * len(keys)
        with self._lock:
            cache = self._cache
            for i, key in enumerate(keys):
                hit = cache.get(key)
                if hit is not None:
                    cache.move_to_end(key)
                    out[i] = hit
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            enc = self.encoding(model)
            fresh: dict[tuple[str, Any], tuple[int, int]] = {}
            for i in missing:
                value = fresh.get(keys[i])
                if value is None:  # identical messages in one batch are encoded once
                    value = fresh[keys[i]] = encode_message(enc, messages[i])
                out[i] = value
            self._store(list(fresh.items()))
        return [v for v in out if v is not None]

    def _store(
        self, items: list[tuple[tuple[str, Any], tuple[int, int]]], messages: bool = True
    ) -> None:
        with self._lock:
            for key, value in items:
                self._cache[key] = value
            if messages:
                self.encoded_messages += len(items)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def cache_size(self) -> int:
        return len(self._cache)
