"""The console's line chart (``proxy.console.chart``): one line per series on one y scale, the
peak at the top, a missing series flat at zero."""

from __future__ import annotations

from proxy.console.chart import HEIGHT, PAD, WIDTH, chart


def test_series_share_one_scale_and_the_peak_is_at_the_top() -> None:
    c = chart({"tokens_received": [0, 50, 100], "cached_tokens": [10, 10, 10]}, 3)
    assert (c.width, c.height, c.peak, c.empty) == (WIDTH, HEIGHT, 100, False)
    received, sent, cached = c.lines
    assert (received.name, received.label, received.total) == ("tokens-received", "received", 150)
    assert received.points == f"{PAD:.1f},{HEIGHT - PAD:.1f} {WIDTH / 2:.1f},{HEIGHT / 2:.1f} " \
                              f"{WIDTH - PAD:.1f},{PAD:.1f}"
    assert sent.total == 0 and set(p.split(",")[1] for p in sent.points.split()) == {
        f"{HEIGHT - PAD:.1f}"}  # absent: flat at zero
    assert cached.total == 30


def test_no_traffic_is_an_empty_chart() -> None:
    c = chart({}, 24)
    assert c.empty and c.peak == 0 and all(len(line.points.split()) == 24 for line in c.lines)
