"""Recall@k of a fused retrieval order against an exact search (``context-proxy recall-audit``).

Before turning on the rerank call (SPEC section 8) for every search, an admin measures how good
the order it would rerank already is. Over one corpus and one set of queries:

- **fused order**: keyword search (SQLite FTS5, BM25, terms OR-ed) and semantic search (cosine
  over the upstream's ``/v1/embeddings``), each contributing its top ``depth`` documents, fused
  by reciprocal rank: ``score(d) = sum over legs of 1 / (RRF_K + rank)`` with ``RRF_K = 60``
  and 1-based ranks; ties go to the earlier document of the corpus.
- **exact order**: every document scored by cosine similarity to the query (numpy, vectorized:
  5,000 documents of 1,536 dimensions take milliseconds a query).
- **recall@k** = |fused top-k ∩ exact top-k| / k (k capped at the corpus size); the overall
  figure is the mean over queries.

Both legs are computed exactly here, so the figure isolates what fusing keyword search into the
order does to the semantic top-k. Corpus lines are ``{"id", "text"}``, query lines
``{"id", "query"}`` (JSONL). The command itself (arguments, report) is
``proxy.cli.recall_audit``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # aiohttp and numpy are imported when the command runs, not at start-up
    import aiohttp
    from numpy.typing import NDArray

RRF_K = 60
DEFAULT_MODEL = "text-embedding-3-small"
TIE_MARGIN = 1e-9  # far above a float64 product's rounding error on vectors of length 1
DOT_BLOCK = 512  # rows multiplied at once in the exact sums
PROGRESS_FROM = 500  # texts to embed from which the progress bar shows by default


class AuditError(Exception):
    """Bad input or an upstream failure; the message says which file/line or what answered."""


@dataclass(frozen=True)
class QueryResult:
    id: str
    query: str
    hits: int
    k: int
    fused: list[int]  # top-k document positions, fused order
    exact: list[int]  # top-k document positions, exact order

    @property
    def recall(self) -> float:
        return self.hits / self.k if self.k else 1.0


def load_jsonl(path: Path, field: str) -> list[tuple[str, str]]:
    """``(id, field value)`` of each non-empty line; ``AuditError`` names the line at fault."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise AuditError(f"{path}: cannot be read: {e.strerror}") from None
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise AuditError(f"{path}:{n}: not valid JSON") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            raise AuditError(f"{path}:{n}: expected an object with a string '{field}'")
        ident = str(obj.get("id", n))
        if ident in seen:
            raise AuditError(f"{path}:{n}: id {ident!r} appears twice")
        seen.add(ident)
        rows.append((ident, obj[field]))
    if not rows:
        raise AuditError(f"{path}: no entries")
    return rows


# --- the two orders ---------------------------------------------------------------------------


def keyword_index(texts: Sequence[str]) -> sqlite3.Connection:
    """An in-memory FTS5 table; rowid = position in ``texts``."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE docs USING fts5(text, tokenize='unicode61')")
    conn.executemany("INSERT INTO docs(rowid, text) VALUES (?, ?)", enumerate(texts))
    return conn


def match_expression(query: str) -> str | None:
    """The query's words as quoted FTS5 strings joined by OR, so no user text is read as FTS5
    syntax (``AND``, ``NEAR``, ``*``, ``:``, quotes); ``None`` when it has no word."""
    words = re.findall(r"\w+", query.lower())
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in dict.fromkeys(words)) or None


def keyword_ranking(conn: sqlite3.Connection, query: str, depth: int) -> list[int]:
    """Positions of the top ``depth`` documents by BM25 (best first)."""
    expr = match_expression(query)
    if expr is None:
        return []
    rows = conn.execute("SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs), rowid "
                        "LIMIT ?", (expr, depth)).fetchall()
    return [int(r[0]) for r in rows]


def _row_sums(rows: NDArray[Any], other: NDArray[Any]) -> NDArray[Any]:
    """Each row's dot product with ``other`` (one vector, or a matrix row by row), summed left
    to right (``cumsum`` is sequential), so every figure is bit for bit what
    ``sum(a * b for a, b in zip(row, vec))`` gives; in blocks of rows, so the products never
    take more than a few MiB at once."""
    import numpy as np

    out = np.zeros(len(rows))
    if rows.shape[1]:
        for at in range(0, len(rows), DOT_BLOCK):
            block = other if other.ndim == 1 else other[at:at + DOT_BLOCK]
            out[at:at + DOT_BLOCK] = np.cumsum(rows[at:at + DOT_BLOCK] * block, axis=1)[:, -1]
    return out


def unit_rows(vecs: Sequence[Sequence[float]] | NDArray[Any]) -> NDArray[Any]:
    """The vectors as the rows of a float64 matrix, each divided by its length (a zero vector
    stays zero: it is similar to nothing)."""
    import numpy as np

    m = np.array(vecs, dtype=np.float64)
    if m.size == 0:
        m = m.reshape(len(m), 0)
    if m.ndim != 2:
        raise ValueError("expected a list of vectors of one size")
    norms = np.sqrt(_row_sums(m, m))
    zero = norms == 0
    m[~zero] /= norms[~zero, None]
    m[zero] = 0.0
    return m


def cosine_ranking(doc_rows: NDArray[Any], query_row: NDArray[Any], top: int | None = None
                   ) -> list[int]:
    """The ``top`` (default: all) document positions by cosine similarity (rows already of
    length 1), best first; ties go to the earlier document.

    A matrix product finds the candidates: every document within ``TIE_MARGIN`` of the
    ``top``-th best score (its summation order moves only the last bits, far below the margin).
    Those few are scored again summed left to right, and ranked by that: the order is the one
    a plain Python sum gives, equal similarities tie exactly, and no rounding noise decides."""
    import numpy as np

    n = len(doc_rows)
    top = n if top is None else min(top, n)
    if top <= 0:
        return []
    fast = doc_rows @ query_row
    floor = np.partition(fast, n - top)[n - top] - TIE_MARGIN
    candidates = np.flatnonzero(fast >= floor)
    exact = _row_sums(doc_rows[candidates], query_row)
    order = np.lexsort((candidates, -exact))  # the last key sorts first
    return [int(candidates[i]) for i in order[:top]]


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion of several rankings (1-based ranks); ties to the lower position."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            score[doc] = score.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda d: (-score[d], d))


def audit(doc_texts: Sequence[str], doc_vecs: Sequence[Sequence[float]] | NDArray[Any],
          queries: Sequence[tuple[str, str]],
          query_vecs: Sequence[Sequence[float]] | NDArray[Any],
          k: int, depth: int) -> list[QueryResult]:
    """recall@k of the fused order against the exact one, per query (see module docstring).
    The exact search is one matrix-vector product per query (numpy, imported here: the proxy
    itself never needs it)."""
    if len(queries) != len(query_vecs):
        raise ValueError("queries and query_vecs differ in length")
    docs = unit_rows(doc_vecs)
    qrows = unit_rows(query_vecs)
    conn = keyword_index(doc_texts)
    kk = min(k, len(doc_texts))
    out = []
    try:
        for (qid, text), qrow in zip(queries, qrows, strict=True):
            exact = cosine_ranking(docs, qrow, max(kk, depth))
            fused = rrf([keyword_ranking(conn, text, depth), exact[:depth]])
            hits = len(set(fused[:kk]) & set(exact[:kk]))
            out.append(QueryResult(qid, text, hits, kk, fused[:kk], exact[:kk]))
    finally:
        conn.close()
    return out


# --- embeddings and progress ------------------------------------------------------------------


class Progress:
    """A plain-text progress bar on ``stream`` (stderr): redrawn in place on a terminal, a line
    per quarter otherwise (logs stay readable)."""

    def __init__(self, total: int, label: str, stream: TextIO, enabled: bool) -> None:
        self.total, self.label, self.stream, self.enabled = total, label, stream, enabled
        self.done = 0
        self._tty = stream.isatty()
        self._quarter = 0

    def advance(self, n: int) -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled or not self.total:
            return
        filled = 30 * self.done // self.total
        line = (f"{self.label} [{'#' * filled}{'-' * (30 - filled)}] {self.done}/{self.total} "
                f"{100 * self.done // self.total}%")
        if self._tty:
            end = "\n" if self.done == self.total else ""
            self.stream.write("\r" + line + end)
        elif 4 * self.done // self.total > self._quarter:
            self._quarter = 4 * self.done // self.total
            self.stream.write(line + "\n")
        self.stream.flush()


async def embed_texts(session: aiohttp.ClientSession, base_url: str, api_key: str | None,
                      model: str, texts: Sequence[str], batch_size: int,
                      progress: Progress) -> list[list[float]]:
    """Embeddings of ``texts`` from ``{base_url}/embeddings``, ``batch_size`` texts a request."""
    import aiohttp
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    vectors: list[list[float]] = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start:start + batch_size])
        try:
            async with session.post(base_url.rstrip("/") + "/embeddings", headers=headers,
                                    json={"model": model, "input": batch}) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            raise AuditError(f"embeddings request failed: {type(e).__name__}") from None
        if status != 200:
            raise AuditError(f"embeddings request answered {status}: "
                             f"{raw[:200].decode('utf-8', 'replace')}")
        try:
            data = sorted(json.loads(raw)["data"], key=lambda d: d["index"])
            got = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError):
            raise AuditError("embeddings answer is not an OpenAI embeddings list") from None
        if len(got) != len(batch) or any(len(v) != len(got[0]) for v in got):
            raise AuditError("embeddings answer has the wrong number or size of vectors")
        vectors.extend(got)
        progress.advance(len(batch))
    if vectors and any(len(v) != len(vectors[0]) for v in vectors):
        raise AuditError("embeddings answer vectors of different sizes")
    return vectors
