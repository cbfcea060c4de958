"""The proxy's ``/metrics`` as the tests and benches read it: ``metric(text, name, **labels)``
is the sum of the samples named ``name`` (counters with their ``_total``, histograms' ``_count``
and ``_sum``) whose labels include ``labels``, ``series(text, name)`` each of those samples with
its labels, and ``scrape(url)`` fetches the exposition."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of ``text`` named ``name``: its labels and its value, in exposition order."""
    return [(dict(s.labels), float(s.value)) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name]


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``text``'s samples named ``name`` with these ``labels`` (0 when none)."""
    return sum(value for found, value in series(text, name)
               if all(found.get(k) == v for k, v in labels.items()))


def scrape(base_url: str, timeout: float = 10) -> str:
    """``GET /metrics`` of the proxy at ``base_url`` (its root, or its ``/v1``)."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode())
