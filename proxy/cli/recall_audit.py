"""``context-proxy recall-audit``: the command around ``proxy.rerank.audit`` (its arguments, the
embeddings it asks for, its report). ``--fake-upstream`` embeds with the in-process fake
upstream's deterministic embeddings, so the command runs offline."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from proxy.rerank.audit import (
    DEFAULT_MODEL,
    PROGRESS_FROM,
    RRF_K,
    AuditError,
    Progress,
    QueryResult,
    audit,
    embed_texts,
    load_jsonl,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", type=Path, required=True, help="JSONL lines {id, text}")
    p.add_argument("--queries", type=Path, required=True, help="JSONL lines {id, query}")
    p.add_argument("--k", type=int, default=8, help="cut-off of recall@k (default 8)")
    p.add_argument("--depth", type=int, default=50,
                   help="documents each leg contributes to the fusion (default 50)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"embedding model ({DEFAULT_MODEL})")
    p.add_argument("--upstream-url", help="OpenAI-compatible base URL ending in /v1 "
                   "(default: the configured upstream)")
    p.add_argument("--api-key", help="key for the embeddings calls (default: the configured "
                   "upstream key)")
    p.add_argument("--batch-size", type=int, default=64, help="texts per embeddings request")
    p.add_argument("--fake-upstream", action="store_true",
                   help="embed with the built-in fake upstream (offline, deterministic)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help=f"progress bar on stderr (auto: from {PROGRESS_FROM} texts)")


async def _run(args: argparse.Namespace, docs: list[tuple[str, str]],
               queries: list[tuple[str, str]]) -> list[QueryResult]:
    import aiohttp

    fake = None
    if args.fake_upstream:
        from proxy.testing.fake_upstream import FakeUpstream

        fake = FakeUpstream(record=False)
        url, key = await fake.start(), None
    else:
        from proxy.settings import load_settings

        settings = load_settings() if not (args.upstream_url and args.api_key) else None
        url = args.upstream_url or (settings.upstream_url if settings else "")
        key = args.api_key or (settings.upstream_api_key if settings else None)
    texts = [t for _, t in docs] + [q for _, q in queries]
    show = args.progress == "always" or (args.progress == "auto" and len(texts) >= PROGRESS_FROM)
    progress = Progress(len(texts), "embedding", sys.stderr, show)
    try:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            vecs = await embed_texts(session, url, key, args.model, texts, args.batch_size,
                                     progress)
    finally:
        if fake is not None:
            await fake.stop()
    n = len(docs)
    return audit([t for _, t in docs], vecs[:n], queries, vecs[n:], args.k, args.depth)


def report_text(results: Sequence[QueryResult], k: int, depth: int, n_docs: int,
                model: str) -> str:
    overall = sum(r.recall for r in results) / len(results)
    lines = [f"recall@{k}: fused order (BM25 + semantic, RRF k={RRF_K}, depth {depth}) "
             "against exact semantic search",
             f"corpus: {n_docs} documents, {len(results)} queries, embeddings: {model}", "",
             f"{'query':<10} {'recall@' + str(k):>9}  {'overlap':>7}  text"]
    for r in results:
        text = r.query if len(r.query) <= 48 else r.query[:47] + "…"
        lines.append(f"{r.id:<10} {r.recall:>9.3f}  {f'{r.hits}/{r.k}':>7}  {text}")
    hits, total = sum(r.hits for r in results), sum(r.k for r in results)
    lines.append(f"{'overall':<10} {overall:>9.3f}  {f'{hits}/{total}':>7}  "
                 f"(mean over {len(results)} queries)")
    return "\n".join(lines)


def report_json(results: Sequence[QueryResult], k: int, depth: int, n_docs: int,
                model: str) -> str:
    return json.dumps({
        "k": k, "depth": depth, "rrf_k": RRF_K, "documents": n_docs, "model": model,
        "overall": sum(r.recall for r in results) / len(results),
        "queries": [{"id": r.id, "recall": r.recall, "hits": r.hits, "k": r.k}
                    for r in results]}, indent=2)


def run_cli(args: argparse.Namespace) -> int:
    """Exit status: 0 report printed, 1 the embeddings upstream failed, 2 bad input."""
    for name in ("k", "depth", "batch_size"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    try:
        docs = load_jsonl(args.corpus, "text")
        queries = load_jsonl(args.queries, "query")
    except AuditError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(_run(args, docs, queries))
    except AuditError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    report = report_json if args.json else report_text
    model = args.model + (" (fake upstream)" if args.fake_upstream else "")
    print(report(results, args.k, args.depth, len(docs), model))
    return 0

