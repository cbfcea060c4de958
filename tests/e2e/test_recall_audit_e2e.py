"""``context-proxy recall-audit`` with its embeddings asked through the proxy: the same figures
as with the built-in fake upstream, in batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.testing.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
CORPUS, QUERIES = ROOT / "examples" / "corpus.jsonl", ROOT / "examples" / "queries.jsonl"


def recalls(capsys: pytest.CaptureFixture[str], *args: str) -> list[float]:
    assert main(["recall-audit", "--corpus", str(CORPUS), "--queries", str(QUERIES), "--json",
                 *args]) == 0
    return [q["recall"] for q in json.loads(capsys.readouterr().out)["queries"]]


def test_embeddings_through_the_proxy(make_harness, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    h: Harness = make_harness()
    key = h.create_key("acme")
    assert recalls(capsys, "--upstream-url", h.base_url, "--api-key", key) == recalls(
        capsys, "--fake-upstream")
    calls = [r for r in h.fake.requests if r.path == "/v1/embeddings"]
    assert len(calls) == 2 and len(calls[0].json["input"]) == 64  # batched
