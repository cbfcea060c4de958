"""The recall audit (``proxy.rerank.audit``): a hand-computed tiny corpus, FTS5 escaping, the
shipped corpus on the fake upstream's deterministic embeddings, the numpy search against a
plain Python one, the progress bar, and embeddings fetched from the fake upstream (its command:
``tests/cli/test_cli_recall_audit.py``)."""

from __future__ import annotations

import io
import math
import random
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import pytest

from proxy.rerank.audit import (
    AuditError,
    Progress,
    QueryResult,
    audit,
    cosine_ranking,
    embed_texts,
    keyword_index,
    keyword_ranking,
    load_jsonl,
    match_expression,
    rrf,
    unit_rows,
)
from proxy.testing.fake_upstream import FakeUpstream, Fault, embed

ROOT = Path(__file__).resolve().parents[2]
CORPUS, QUERIES = ROOT / "examples" / "corpus.jsonl", ROOT / "examples" / "queries.jsonl"

# Four documents on a 2-d "embedding" plane; each query word occurs in exactly one document.
TINY_TEXTS = ["the red fox", "a blue whale", "green turtle", "zebra crossing"]
TINY_VECS = [[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]]
TINY_QUERIES = [("q0", "zebra"), ("q1", "turtle")]
TINY_QVECS = [[1.0, 0.0], [0.6, 0.8]]


def test_tiny_corpus_matches_the_hand_computed_figure() -> None:
    # q0 "zebra", vector (1, 0). Exact cosine: d0 1.0, d1 0.8, d2 0.6, d3 0.0 -> [0, 1, 2, 3].
    #   BM25 finds only d3. RRF (k=60): d3 = 1/61 + 1/64 = 0.0320, d0 = 1/61 = 0.0164,
    #   d1 = 1/62, d2 = 1/63 -> fused [3, 0, 1, 2]. Top-2: {3, 0} vs {0, 1}: recall 1/2.
    # q1 "turtle", vector (0.6, 0.8). Exact: d2 1.0, d1 0.96, d3 0.8, d0 0.6 -> [2, 1, 3, 0].
    #   BM25 finds only d2: d2 = 2/61, d1 = 1/62, d3 = 1/63, d0 = 1/64 -> fused [2, 1, 3, 0].
    #   Top-2 agree: recall 1. Overall recall@2 = (0.5 + 1) / 2 = 0.75.
    results = audit(TINY_TEXTS, TINY_VECS, TINY_QUERIES, TINY_QVECS, k=2, depth=50)
    assert [(r.fused, r.exact) for r in results] == [([3, 0], [0, 1]), ([2, 1], [2, 1])]
    assert [r.recall for r in results] == [0.5, 1.0]
    assert sum(r.recall for r in results) / len(results) == 0.75
    # recall@3: q0 {3, 0, 1} vs {0, 1, 2} = 2/3; q1 {2, 1, 3} both.
    results = audit(TINY_TEXTS, TINY_VECS, TINY_QUERIES, TINY_QVECS, k=3, depth=50)
    assert [(r.hits, r.k) for r in results] == [(2, 3), (3, 3)]
    # k above the corpus size is capped: every order holds the same 4 documents.
    assert [r.recall for r in audit(TINY_TEXTS, TINY_VECS, TINY_QUERIES, TINY_QVECS, 10, 50)
            ] == [1.0, 1.0]


def test_rrf_sums_reciprocal_ranks_and_breaks_ties_by_position() -> None:
    assert rrf([[2, 0], [0, 1]]) == [0, 2, 1]  # 0: 1/62 + 1/61
    assert rrf([[1], [0]]) == [0, 1]  # equal scores: the earlier document
    assert rrf([]) == []


@pytest.mark.parametrize("query", [
    'NEAR(zebra turtle)', '"zebra', 'text:zebra', 'zebra* AND -turtle', '^zebra',
    'zebra OR', '(zebra', "zebra's crossing", 'zebra "" ""', "ZEBRA!!!",
])
def test_user_text_cannot_break_the_match_syntax(query: str) -> None:
    conn = keyword_index(TINY_TEXTS)
    assert 3 in keyword_ranking(conn, query, 10)


def test_match_expression_quotes_words() -> None:
    assert match_expression('say "hi" AND bye bye') == '"say" OR "hi" OR "and" OR "bye"'
    assert match_expression("?!") is None
    assert keyword_ranking(keyword_index(TINY_TEXTS), "?!", 10) == []


def test_bm25_prefers_the_rarer_term() -> None:
    texts = ["apple pie", "apple tart", "apple cake", "cherry pie"]
    assert keyword_ranking(keyword_index(texts), "cherry apple", 10)[0] == 3


def test_progress_bar() -> None:
    out = io.StringIO()
    bar = Progress(1000, "embedding", out, enabled=True)
    for _ in range(10):
        bar.advance(100)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1].endswith("1000/1000 100%")
    assert lines[0] == "embedding [#########---------------------] 300/1000 30%"

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    bar = Progress(4, "embedding", tty, enabled=True)
    for _ in range(4):
        bar.advance(1)
    assert tty.getvalue().count("\r") == 4 and tty.getvalue().endswith("4/4 100%\n")
    quiet = io.StringIO()
    Progress(10, "x", quiet, enabled=False).advance(10)
    assert quiet.getvalue() == ""


# --- the exact search: numpy, with the figures of the plain-Python search it replaced ---------


def reference_ranking(doc_vecs: Sequence[Sequence[float]], query_vec: Sequence[float]
                      ) -> list[int]:
    """The exact order as the audit computed it before numpy, kept as the oracle: normalize,
    sum the products left to right, sort by (-score, position)."""
    def normalize(vec: Sequence[float]) -> list[float]:
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else [0.0] * len(vec)

    docs, q = [normalize(d) for d in doc_vecs], normalize(query_vec)
    scores = [sum(a * b for a, b in zip(d, q, strict=True)) for d in docs]
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def reference_audit(doc_texts: list[str], doc_vecs: list[list[float]],
                    queries: list[tuple[str, str]], query_vecs: list[list[float]], k: int,
                    depth: int) -> list[QueryResult]:
    conn = keyword_index(doc_texts)
    kk = min(k, len(doc_texts))
    out = []
    for (qid, text), qvec in zip(queries, query_vecs, strict=True):
        exact = reference_ranking(doc_vecs, qvec)
        fused = rrf([keyword_ranking(conn, text, depth), exact[:depth]])
        out.append(QueryResult(qid, text, len(set(fused[:kk]) & set(exact[:kk])), kk,
                               fused[:kk], exact[:kk]))
    conn.close()
    return out


@pytest.mark.parametrize(("k", "depth"), [(1, 5), (3, 5), (8, 50), (20, 10), (60, 60)])
def test_numpy_search_gives_the_figures_of_the_plain_python_one(k: int, depth: int) -> None:
    docs, queries = load_jsonl(CORPUS, "text"), load_jsonl(QUERIES, "query")
    texts = [t for _, t in docs]
    dvecs, qvecs = [embed(t) for t in texts], [embed(q) for _, q in queries]
    # The fake's word-hash embeddings tie often (equal similarities that a different summation
    # order would tell apart in the last bits): the orders must still be the same.
    assert audit(texts, dvecs, queries, qvecs, k, depth) == \
        reference_audit(texts, dvecs, queries, qvecs, k, depth)


def test_full_orders_match_on_vectors_full_of_ties() -> None:
    rng = random.Random(3)
    docs = [[rng.choice([-1.0, 0.0, 0.5, 1.0]) for _ in range(12)] for _ in range(300)]
    docs[7] = [0.0] * 12  # a zero vector is similar to nothing
    rows = unit_rows(docs)
    for _ in range(20):
        q = [rng.choice([-1.0, 0.0, 1.0]) for _ in range(12)]
        want = reference_ranking(docs, q)
        assert cosine_ranking(rows, unit_rows([q])[0]) == want
        assert cosine_ranking(rows, unit_rows([q])[0], 10) == want[:10]
    assert cosine_ranking(rows, unit_rows([[0.0] * 12])[0], 3) == [0, 1, 2]  # all tied
    assert cosine_ranking(unit_rows([]), unit_rows([[1.0]])[0]) == []


def test_realistic_size_5000_documents_of_1536_dimensions() -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    docs = rng.standard_normal((5_000, 1_536))
    planted = [3, 1_234, 4_999]  # each query is a slightly moved copy of one document
    qvecs = docs[planted] + 0.05 * rng.standard_normal((len(planted), 1_536))
    texts = [f"document {i} topic{i % 50}" for i in range(5_000)]
    queries = [(f"q{n}", f"topic{p % 50}") for n, p in enumerate(planted)]
    results = audit(texts, docs.tolist(), queries, qvecs.tolist(), k=10, depth=50)
    assert [r.exact[0] for r in results] == planted
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    for r, q in zip(results, qvecs, strict=True):
        plain = np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10]  # no near ties here
        assert r.exact == plain.tolist() and r.k == 10 and 0 <= r.recall <= 1
        assert r.exact[0] in r.fused  # the planted twin is first in both legs' fusion


def test_the_proxy_starts_without_numpy() -> None:
    """numpy is imported by the audit when it runs, never by the proxy's own start-up path."""
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import proxy.app, proxy.cli, proxy.rerank.audit\n"
            "from proxy.rerank.audit import audit\n"
            "try:\n    audit(['a'], [[1.0]], [('q', 'a')], [[1.0]], 1, 1)\n"
            "except ImportError:\n    print('audit needs numpy')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "audit needs numpy"


def test_load_jsonl_names_the_line_at_fault(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n\n{"text": "two"}\n')
    assert load_jsonl(path, "text") == [("a", "one"), ("3", "two")]
    for body, says in [("{oops\n", ":1: not valid JSON"), ('{"id": 1}\n', "string 'text'"),
                       ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "appears twice"),
                       ("\n", "no entries")]:
        path.write_text(body)
        with pytest.raises(AuditError, match=re.escape(says)):
            load_jsonl(path, "text")
    with pytest.raises(AuditError, match="cannot be read"):
        load_jsonl(tmp_path / "none.jsonl", "text")


async def test_embeddings_come_in_batches_from_the_upstream() -> None:
    fake = FakeUpstream()
    url = await fake.start()
    try:
        async with aiohttp.ClientSession() as session:
            bar = Progress(5, "embedding", io.StringIO(), enabled=False)
            vecs = await embed_texts(session, url, "sk-x", "m", ["a", "b c", "d", "e", "f"], 2,
                                     bar)
        assert vecs == [embed(t) for t in ["a", "b c", "d", "e", "f"]] and bar.done == 5
        calls = [r for r in fake.requests if r.path == "/v1/embeddings"]
        assert [len(r.json["input"]) for r in calls] == [2, 2, 1]
        assert calls[0].headers["Authorization"] == "Bearer sk-x"
        fake.faults.append(Fault(status=500, path="/v1/embeddings"))
        async with aiohttp.ClientSession() as session:
            with pytest.raises(AuditError, match="answered 500"):
                await embed_texts(session, url, None, "m", ["a"], 2, bar)
    finally:
        await fake.stop()
