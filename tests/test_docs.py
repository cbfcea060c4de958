"""The reference documentation (README.md and docs/*.md) names everything a user can set or see:
policy fields, environment variables, response headers and metrics, all read from the code."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from proxy.metrics import Metrics
from proxy.policy.model import FIELDS

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"X-[A-Za-z-]+", re.IGNORECASE)
# Headers the proxy sets on its requests to the upstream, never on a response (none today: the
# summary call sends no organization name to the provider).
UPSTREAM_ONLY: set[str] = set()
# The built-in fake upstream and test harness stand in for other servers; their headers are not
# the proxy's.
NOT_THE_PROXY = ROOT / "proxy" / "testing"


def docs_text() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text() for p in pages)


def _trees() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _strings(node: ast.AST) -> Iterator[str]:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def environment_variables() -> set[str]:
    return {name for _, tree in _trees() for s in _strings(tree)
            for name in re.findall(r"CONTEXT_PROXY_[A-Z_]+", s)}


def headers_set_in(tree: ast.AST) -> set[str]:
    """Header names the code writes: keys of dict displays (``headers={...}``) and targets of
    item assignments (``h["X-..."] = ...``). Names only read (``.get("X-...")``) are left out."""
    found: set[str] = set()
    for node in ast.walk(tree):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            keys = [node.slice]
        found.update(k.value for k in keys if isinstance(k, ast.Constant)
                     and isinstance(k.value, str) and HEADER.fullmatch(k.value))
    return found


def set_headers() -> set[str]:
    return {h for path, tree in _trees() if not path.is_relative_to(NOT_THE_PROXY)
            for h in headers_set_in(tree)}


def metric_names() -> set[str]:
    """Metric names as ``/metrics`` exposes them (counters with their ``_total``)."""
    return {f.name + "_total" if f.type == "counter" else f.name
            for f in Metrics().registry.collect()}


def test_readme_documents_every_policy_field() -> None:
    docs = docs_text()
    missing = [name for name in FIELDS if f"| `{name}` |" not in docs]
    assert FIELDS and missing == []


def test_readme_documents_every_environment_variable() -> None:
    names = environment_variables()
    assert {"CONTEXT_PROXY_DB", "CONTEXT_PROXY_ADMIN_TOKEN"} <= names
    docs = docs_text()
    assert sorted(n for n in names if f"`{n}`" not in docs) == []


def test_docs_name_every_response_header() -> None:
    headers = set_headers()
    # the scan finds what the proxy sets, and the exclusions still name real headers
    assert {"X-Conversation-Id", "X-Context-Compaction", "X-Rerank"} | UPSTREAM_ONLY <= headers
    docs = docs_text().lower()
    missing = sorted(h for h in headers - UPSTREAM_ONLY if f"`{h.lower()}`" not in docs)
    assert missing == []


def test_docs_name_every_metric() -> None:
    names = metric_names()
    assert {"context_proxy_requests_total", "context_proxy_rerank_duration_seconds"} <= names
    docs = docs_text()
    assert sorted(n for n in names if f"`{n}`" not in docs) == []


def test_headers_set_in_ignores_headers_only_read() -> None:
    tree = ast.parse(
        'compact = request.headers.get("X-Context-Compact")\n'
        'h = {"X-Conversation-Id": cid, "content-type": "text/plain"}\n'
        'h["X-Context-Retried"] = "yes"\n'
        'seen = response.headers["X-Seen"]\n')
    assert headers_set_in(tree) == {"X-Conversation-Id", "X-Context-Retried"}


def test_the_code_map_points_at_code_that_exists() -> None:
    """Every row of "Where each rule lives" names files that exist and functions defined in
    one of them (a renamed function or a moved rule must update the map)."""
    import re

    text = (ROOT / "README.md").read_text()
    table = text.split("### Where each rule lives", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 15
    for row in rows[1:]:
        files = re.findall(r"`(proxy/[\w/]+\.py)`", row)
        names = re.findall(r"`([A-Za-z_][\w.]*)`", row.split("|")[3])
        assert files, row
        source = "\n".join((ROOT / f).read_text() for f in files)
        for name in names:
            leaf = name.rsplit(".", 1)[-1]
            if name.startswith("proxy/") or (leaf.isupper() and leaf in source):
                continue
            assert re.search(rf"(def|class) {leaf}\b|^{leaf} = ", source, re.M), (row, name)


def test_every_link_between_the_pages_resolves() -> None:
    """README's short top links to the pages in docs/; each relative link names a file."""
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), (page.name, target)
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README does not link docs/{page.name}"
