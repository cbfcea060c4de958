"""Reading ``/metrics`` (``proxy.testing.scrape``): sums over the samples whose labels include
the ones asked for, counters by their ``_total`` name, histograms by ``_count``."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from proxy.metrics import Metrics
from proxy.testing.scrape import metric, scrape, series

TEXT = """# HELP context_proxy_requests Requests.
# TYPE context_proxy_requests counter
context_proxy_requests_total{route="chat",status_class="2xx"} 3.0
context_proxy_requests_total{route="chat",status_class="4xx"} 2.0
context_proxy_requests_total{route="messages",status_class="2xx"} 1.0
# HELP context_proxy_overhead_seconds Overhead.
# TYPE context_proxy_overhead_seconds histogram
context_proxy_overhead_seconds_bucket{le="+Inf",route="chat"} 4.0
context_proxy_overhead_seconds_count{route="chat"} 4.0
context_proxy_overhead_seconds_sum{route="chat"} 0.5
"""


def test_metric_sums_the_samples_whose_labels_include_the_ones_given() -> None:
    assert metric(TEXT, "context_proxy_requests_total") == 6
    assert metric(TEXT, "context_proxy_requests_total", route="chat") == 5
    assert metric(TEXT, "context_proxy_requests_total", route="chat", status_class="4xx") == 2
    assert metric(TEXT, "context_proxy_requests_total", route="relay") == 0
    assert metric(TEXT, "context_proxy_requests", route="chat") == 0  # the family, no sample
    assert metric(TEXT, "context_proxy_overhead_seconds_count") == 4
    assert metric(TEXT, "context_proxy_overhead_seconds_sum", route="chat") == 0.5


def test_series_lists_each_sample_with_its_labels() -> None:
    assert series(TEXT, "context_proxy_requests_total") == [
        ({"route": "chat", "status_class": "2xx"}, 3.0),
        ({"route": "chat", "status_class": "4xx"}, 2.0),
        ({"route": "messages", "status_class": "2xx"}, 1.0)]
    assert series(TEXT, "nothing_total") == []


def test_metric_reads_what_the_registry_renders() -> None:
    m = Metrics()
    m.requests.labels(route="chat", status_class="2xx").inc(2)
    assert metric(m.render().decode(), "context_proxy_requests_total", route="chat") == 2


@pytest.fixture
def served() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = TEXT.encode() if self.path == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_scrape_gets_metrics_from_the_root_or_the_v1_url(served: str) -> None:
    assert scrape(served) == TEXT
    assert scrape(served + "/v1") == TEXT
    assert scrape(served + "/v1/") == TEXT
