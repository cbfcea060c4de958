"""Keeping the upstream key out of what reaches a client: bodies whole or streamed, and headers.

Upstreams (and the gateways in front of them) echo credentials in error pages, debug headers
and the like. Every answer the proxy relays passes here first when it holds an upstream key.
A streamed body is scrubbed as it goes: each chunk is written at once except, at its very end, a
piece that could be the start of the key (so a key split across two chunks is still caught),
which waits for the next chunk. A compressed body is looked into too, whole or streamed.
"""

from __future__ import annotations

import zlib

REDACTED = b"[redacted]"
MAX_DECODED = 8 << 20  # a compressed body is looked into up to this many bytes


DECODED = ("gzip", "x-gzip", "deflate")  # what is looked into, whole or streamed


def _decoder(coding: str) -> zlib._Decompress:
    return zlib.decompressobj(47 if coding != "deflate" else 15)  # 47: gzip or zlib header


class Scrubber:
    """Removes ``secret`` from a body fed chunk by chunk; ``flush`` at the end. A body whose
    ``encoding`` is one of ``DECODED`` is decoded as it goes (then ``decodes``: it is relayed
    decoded, without its Content-Encoding), so a key in a compressed stream is caught too; a
    chunk that does not decode raises ``zlib.error``. With an empty ``secret`` it only
    decodes (a stream whose events are checked must be read decoded)."""

    def __init__(self, secret: bytes, encoding: str = "") -> None:
        self.secret = secret
        self._held = b""
        coding = encoding.strip().lower()
        self._decoder = _decoder(coding) if coding in DECODED else None

    @property
    def decodes(self) -> bool:
        return self._decoder is not None

    def feed(self, chunk: bytes) -> bytes:
        if self._decoder is not None:
            chunk = self._decoder.decompress(chunk)
        if not self.secret:  # nothing to hide: it only decodes
            return chunk
        data = self._held + chunk
        if self.secret in data:
            data = data.replace(self.secret, REDACTED)
        if data[-1:] not in self.secret:  # (an SSE line break, say) nothing to hold back
            self._held = b""
            return data
        cut = _partial_at(data, self.secret)
        self._held = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held


def _partial_at(data: bytes, secret: bytes) -> int:
    """Where the longest end of ``data`` that is a beginning of ``secret`` starts (``len``
    of data when there is none)."""
    first = secret[:1]
    i = data.find(first, max(0, len(data) - len(secret) + 1))
    while i != -1:
        if secret.startswith(data[i:]):
            return i
        i = data.find(first, i + 1)
    return len(data)


def decode_whole(body: bytes, encoding: str) -> bytes | None:
    """``body`` decoded under ``encoding`` (one of ``DECODED``), up to ``MAX_DECODED`` bytes;
    None when it does not decode."""
    try:
        return _decoder(encoding.strip().lower()).decompress(body, MAX_DECODED)
    except zlib.error:
        return None


def scrub_whole(body: bytes, secret: bytes, encoding: str) -> tuple[bytes, bool]:
    """``body`` without ``secret``; ``(body, decoded)`` where ``decoded`` says the body had to
    be decompressed to be scrubbed (then it is sent decoded, without its Content-Encoding)."""
    if secret in body:
        return body.replace(secret, REDACTED), False
    coding = encoding.strip().lower()
    if coding not in DECODED:
        return body, False
    try:
        plain = _decoder(coding).decompress(body, MAX_DECODED)
    except zlib.error:
        return body, False
    if secret not in plain:
        return body, False
    return plain.replace(secret, REDACTED), True

