"""Request bodies sent compressed (``proxy.http.encoding.decoded``): gzip, zlib deflate and raw
deflate decode; a body that does not decode is a 400, an unknown coding a 415, a body over the
limit once decoded a 413 (a small upload may not inflate without bound)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from proxy.errors import ApiError
from proxy.http.encoding import SERVER_OPTIONS, decoded

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(("coding", "raw"), [
    ("", BODY), ("identity", BODY), ("gzip", gzip.compress(BODY)),
    ("X-GZIP ", gzip.compress(BODY)), ("deflate", zlib.compress(BODY)),
    ("deflate", raw_deflate(BODY))])
def test_each_coding_decodes_to_the_body(coding: str, raw: bytes) -> None:
    assert decoded(raw, coding, 1_000) == BODY


@pytest.mark.parametrize(("coding", "raw", "status", "code"), [
    ("gzip", b"not gzip at all", 400, "invalid_encoding"),
    ("gzip", gzip.compress(BODY)[:-6], 400, "invalid_encoding"),  # cut short
    ("gzip", gzip.compress(BODY) + b"junk", 400, "invalid_encoding"),  # trailing bytes
    ("deflate", b"\x00\x01garbage", 400, "invalid_encoding"),
    ("br", BODY, 415, "unsupported_encoding"),
    ("gzip", gzip.compress(b"x" * 5_000), 413, "request_too_large")])
def test_what_does_not_decode_is_refused_by_name(coding: str, raw: bytes, status: int,
                                                  code: str) -> None:
    with pytest.raises(ApiError) as refused:
        decoded(raw, coding, 1_000)
    assert (refused.value.status, refused.value.code) == (status, code)


def test_the_server_leaves_decoding_to_the_routes() -> None:
    assert SERVER_OPTIONS["auto_decompress"] is False
