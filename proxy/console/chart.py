"""A small line chart as inline SVG, computed on the server (no script, no external file)."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, PAD = 480, 120, 6

SERIES = (("tokens_received", "received"), ("tokens_sent", "sent upstream"),
          ("cached_tokens", "cached"))


@dataclass(frozen=True)
class Line:
    name: str  # the CSS class: series-<name> (the column, with dashes)
    label: str
    points: str  # the polyline's "x,y x,y ..."
    total: int


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    lines: tuple[Line, ...]
    peak: int  # the largest hourly value: the top of the y axis

    @property
    def empty(self) -> bool:
        return self.peak == 0


def _points(values: list[int], peak: int) -> str:
    step = (WIDTH - 2 * PAD) / max(1, len(values) - 1)
    span = HEIGHT - 2 * PAD
    return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - (v / peak if peak else 0) * span:.1f}"
                    for i, v in enumerate(values))


def chart(series: dict[str, list[int]], hours: int) -> Chart:
    """One line per series in ``SERIES`` (absent ones are zero), all on one y scale."""
    values = {name: series.get(name, [0] * hours) for name, _ in SERIES}
    peak = max((max(v) for v in values.values()), default=0)
    lines = tuple(Line(name.replace("_", "-"), label, _points(values[name], peak),
                       sum(values[name])) for name, label in SERIES)
    return Chart(WIDTH, HEIGHT, lines, peak)
