"""Streams are relayed chunk by chunk: the client sees the first chunk while the upstream is
still sending."""

from __future__ import annotations

import time

from proxy.testing.fake_upstream import FakeUpstream


def test_first_chunk_arrives_before_upstream_finishes(make_harness, sdk) -> None:
    fake = FakeUpstream(stream_delay_s=0.4, stream_chunks=4)
    h = make_harness(fake=fake)
    c = sdk(h, h.create_key())
    start = time.monotonic()
    stream = c.chat.completions.create(
        model="gpt-4o", stream=True,
        messages=[{"role": "user", "content": "a fairly long prompt to split in pieces"}])
    arrivals = [time.monotonic() - start for _ in stream]
    # The fake waits 0.4 s between its 4 content chunks (>= 1.2 s in all). A relay that
    # buffered the stream would deliver every chunk at once at the end.
    assert len(arrivals) >= 4
    assert arrivals[-1] - arrivals[0] >= 1.0
    assert arrivals[0] < arrivals[-1] - 1.0


def test_other_route_streams_through(make_harness) -> None:
    import urllib.request

    h = make_harness(fake=FakeUpstream(stream_delay_s=0.3))
    req = urllib.request.Request(h.base_url + "/files/stream-me?stream=4",
                                 headers={"Authorization": f"Bearer {h.create_key()}"})
    start = time.monotonic()
    with urllib.request.urlopen(req) as resp:
        first = resp.readline()
        t_first = time.monotonic() - start
        rest = resp.read()
        t_last = time.monotonic() - start
    assert first == b"part 0\n"
    assert rest == b"part 1\npart 2\npart 3\n"
    assert t_last - t_first >= 0.8
