"""Request bodies sent with a ``Content-Encoding``, decoded by the route that reads them.

The server does not decode request bodies itself (``SERVER_OPTIONS``): aiohttp's parser refuses
a body that does not decode (or a coding it lacks a library for) before any route sees it,
with a plain-text 400 that no SDK can read. Decoded here instead, the managed routes answer
such a body in their API's own error shape, and the relay passes a client's compressed upload
through as it came (with its ``Content-Encoding``).
"""

from __future__ import annotations

import zlib
from typing import Any

from proxy.errors import ApiError, bad_request

# Options of the aiohttp server every serving process (and the test harness) runs.
SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
          "deflate": zlib.MAX_WBITS}  # deflate: the zlib format; raw deflate is tried next


def decoded(raw: bytes, coding: str, limit: int) -> bytes:
    """``raw`` decoded under ``coding`` (a ``Content-Encoding`` value), at most ``limit`` bytes
    once decoded: 400 ``invalid_encoding`` when it does not decode, 415 for a coding the proxy
    does not take, 413 past the limit."""
    name = coding.strip().lower()
    if name in ("", "identity"):
        return raw
    wbits = _WBITS.get(name)
    if wbits is None:
        raise ApiError(415, f"Content-Encoding {coding[:40]!r} is not supported: send the body "
                            "as it is, or gzip or deflate it.", code="unsupported_encoding")
    try:
        return _inflate(raw, wbits, limit)
    except zlib.error:
        if name != "deflate":
            raise _undecodable(coding) from None
    try:  # some clients send raw deflate (no zlib header) as "deflate"
        return _inflate(raw, -zlib.MAX_WBITS, limit)
    except zlib.error:
        raise _undecodable(coding) from None


def _inflate(raw: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(raw, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise ApiError(413, f"The request body is more than {limit} bytes once decoded; this "
                            "proxy accepts at most that.", code="request_too_large")
    out += inflater.flush()
    if not inflater.eof or inflater.unused_data:  # cut short, or something after the end
        raise zlib.error("incomplete or trailing data")
    return out


def _undecodable(coding: str) -> ApiError:
    return bad_request(f"The request body does not decode as its Content-Encoding "
                       f"({coding[:40]!r}) says.", code="invalid_encoding")
