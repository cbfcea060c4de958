"""Keeping the upstream key out of relayed bodies (``proxy.upstream.scrub``): whole, streamed in
any chunking (a key split across chunks included) and compressed."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.scrub import REDACTED, Scrubber, scrub_whole

SECRET = b"sk-upstream-0123456789"
BODY = b'data: {"echo": "Bearer sk-upstream-0123456789", "n": 1}\n\ndata: [DONE]\n\n'
CLEAN = BODY.replace(SECRET, REDACTED)


def scrubbed(chunks: list[bytes], encoding: str = "") -> bytes:
    s = Scrubber(SECRET, encoding)
    return b"".join(s.feed(c) for c in chunks) + s.flush()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=8))
def test_a_streamed_body_is_scrubbed_however_it_is_cut(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [BODY[a:b] for a, b in zip([0, *points], [*points, len(BODY)], strict=True)]
    assert scrubbed(chunks) == CLEAN


def test_only_what_could_start_the_key_is_held_back() -> None:
    s = Scrubber(SECRET)
    assert s.feed(b"hello sk-up") == b"hello "
    assert s.feed(b"per case\n") == b"sk-upper case\n"
    assert s.feed(b"done\n") == b"done\n" and s.flush() == b""
    held = Scrubber(SECRET)
    assert held.feed(b"tail sk") == b"tail " and held.flush() == b"sk"


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_stream_is_decoded_and_scrubbed(encoding: str) -> None:
    packed = gzip.compress(BODY) if encoding == "gzip" else zlib.compress(BODY)
    s = Scrubber(SECRET, encoding)
    assert s.decodes
    assert scrubbed([packed[:7], packed[7:30], packed[30:]], encoding) == CLEAN
    assert not Scrubber(SECRET, "br").decodes


def test_a_chunk_that_does_not_decode_raises() -> None:
    with pytest.raises(zlib.error):
        Scrubber(SECRET, "gzip").feed(b"not gzip at all")


def test_a_whole_body_is_scrubbed_decoded_only_when_it_must_be() -> None:
    assert scrub_whole(BODY, SECRET, "") == (CLEAN, False)
    assert scrub_whole(b"nothing here", SECRET, "gzip") == (b"nothing here", False)
    packed = gzip.compress(BODY)
    assert scrub_whole(packed, SECRET, "gzip") == (CLEAN, True)
    harmless = gzip.compress(b"no key inside")
    assert scrub_whole(harmless, SECRET, "gzip") == (harmless, False)
    assert scrub_whole(b"\x1f\x8bbroken", SECRET, "gzip") == (b"\x1f\x8bbroken", False)
