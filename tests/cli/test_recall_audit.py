"""``context-proxy recall-audit`` (``proxy.cli.recall_audit``): the shipped corpus through the
command with the built-in fake upstream gives the figures of the audit itself, as JSON or text;
bad input exits 2 naming it, an unreachable upstream 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.cli.recall_audit import report_text
from proxy.rerank.audit import QueryResult, audit, load_jsonl
from proxy.testing.fake_upstream import embed

ROOT = Path(__file__).resolve().parents[2]
CORPUS, QUERIES = ROOT / "examples" / "corpus.jsonl", ROOT / "examples" / "queries.jsonl"


def _direct(k: int = 8, depth: int = 50) -> list[float]:
    docs, queries = load_jsonl(CORPUS, "text"), load_jsonl(QUERIES, "query")
    return [r.recall for r in audit([t for _, t in docs], [embed(t) for _, t in docs], queries,
                                    [embed(q) for _, q in queries], k, depth)]


@pytest.mark.own_store
def test_shipped_corpus_against_the_fake_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recall-audit", "--corpus", str(CORPUS), "--queries", str(QUERIES),
                 "--k", "8", "--fake-upstream", "--json", "--batch-size", "16"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == 60 and len(report["queries"]) == 10
    expected = _direct()
    assert [q["recall"] for q in report["queries"]] == expected
    assert report["overall"] == pytest.approx(sum(expected) / len(expected))
    assert 0 < report["overall"] < 1  # the fusion moves some documents: a figure worth reading

    assert main(["recall-audit", "--corpus", str(CORPUS), "--queries", str(QUERIES),
                 "--fake-upstream"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("recall@8: fused order (BM25 + semantic, RRF k=60, depth 50)")
    assert "q01 " in out and "\noverall " in out


@pytest.mark.own_store
def test_bad_input_and_unreachable_upstream(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "txt": "no"}\n')
    assert main(["recall-audit", "--corpus", str(bad), "--queries", str(QUERIES),
                 "--fake-upstream"]) == 2
    assert f"{bad}:2: expected an object with a string 'text'" in capsys.readouterr().err
    assert main(["recall-audit", "--corpus", str(tmp_path / "none.jsonl"), "--queries",
                 str(QUERIES), "--fake-upstream"]) == 2
    assert main(["recall-audit", "--corpus", str(CORPUS), "--queries", str(QUERIES),
                 "--k", "0", "--fake-upstream"]) == 2
    assert main(["recall-audit", "--corpus", str(CORPUS), "--queries", str(QUERIES),
                 "--upstream-url", "http://127.0.0.1:9/v1", "--api-key", "x"]) == 1
    assert "embeddings request failed" in capsys.readouterr().err




def test_the_text_report_has_a_line_per_query_and_the_overall_figure() -> None:
    results = [QueryResult("q1", "a query " * 10, 1, 2, [0, 1], [0, 2]),
               QueryResult("q2", "short", 2, 2, [3, 4], [4, 3])]
    text = report_text(results, 2, 50, 9, "m")
    assert text.splitlines()[1] == "corpus: 9 documents, 2 queries, embeddings: m"
    assert "q1             0.500      1/2  a query a query" in text and "…" in text
    assert text.splitlines()[-1].startswith("overall        0.750      3/4")
