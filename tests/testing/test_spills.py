"""``proxy.testing.spills`` against a stand-in spills endpoint (a stdlib HTTP server on
loopback): the ids a text names, read once each in order with the key given; where a fact is
(in the text, in a spill, or lost). Through the proxy itself: tests/e2e/test_fact_spill.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proxy.testing.spills import fact_spill, spilled

SPILLS = {"a" * 16: "nothing here", "b" * 16: "FACT-9 is here"}
SEEN: list[str] = []


class Spills(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        sid = self.path.rsplit("/", 1)[1]
        SEEN.append(sid)
        ok = self.path.startswith("/v1/conversations/c1/spills/") and sid in SPILLS and \
            self.headers["Authorization"] == "Bearer k1"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(SPILLS[sid].encode() if ok else b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Spills)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    SEEN.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


TEXT = f"[tool output cleared: 9 tokens from x; spill {'a' * 16}] spill {'b' * 16} spill {'a' * 16}"


def test_every_named_spill_is_read_once_in_order(base_url: str) -> None:
    assert list(spilled(base_url, "k1", "c1", TEXT)) == \
        [("a" * 16, "nothing here"), ("b" * 16, "FACT-9 is here")]
    assert SEEN == ["a" * 16, "b" * 16]


def test_where_a_fact_is(base_url: str) -> None:
    assert fact_spill(base_url, "k1", "c1", "FACT-9 in the text", "FACT-9") == ""
    assert fact_spill(base_url, "k1", "c1", TEXT, "FACT-9") == "b" * 16
    assert fact_spill(base_url, "k1", "c1", TEXT, "FACT-0") is None
    assert fact_spill(base_url, "k1", "c1", "no spill named", "FACT-9") is None
