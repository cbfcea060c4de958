"""The reference documentation (README.md and docs/*.md) names everything a user can set or see:
policy fields, environment variables, response headers and metrics, all read from the code."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from proxy.metrics import Metrics
from proxy.policy.model import FIELDS

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"X-[A-Za-z-]+", re.IGNORECASE)
CONTEXT_HEADER = re.compile(r"X-Context-[A-Za-z-]+|X-Request-Id")
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


def header_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level constants naming a header (``REQUEST_ID = "X-Request-Id"``)."""
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            and HEADER.fullmatch(node.value.value)
            for target in node.targets if isinstance(target, ast.Name)}


def _header_name(key: ast.expr | None, constants: Mapping[str, set[str]]) -> set[str]:
    """The header names ``key`` stands for: a string, or a constant by name (``IGNORED``,
    ``manual.IGNORED``)."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return {key.value} if HEADER.fullmatch(key.value) else set()
    if isinstance(key, ast.Name):
        return set(constants.get(key.id, ()))
    if isinstance(key, ast.Attribute):
        return set(constants.get(key.attr, ()))
    return set()


def headers_set_in(tree: ast.AST, constants: Mapping[str, set[str]] | None = None) -> set[str]:
    """Header names the code writes: keys of dict displays (``headers={...}``) and targets of
    item assignments (``h["X-..."] = ...``), written out or as a named constant. Names only
    read (``.get("X-...")``) are left out."""
    found: set[str] = set()
    for node in ast.walk(tree):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            keys = [node.slice]
        for key in keys:
            found |= _header_name(key, constants or {})
    return found


def _proxy_trees() -> list[ast.Module]:
    return [tree for path, tree in _trees() if not path.is_relative_to(NOT_THE_PROXY)]


def set_headers() -> set[str]:
    trees = _proxy_trees()
    constants: dict[str, set[str]] = {}
    for tree in trees:
        for name, header in header_constants(tree).items():
            constants.setdefault(name, set()).add(header)
    return {h for tree in trees for h in headers_set_in(tree, constants)}


def named_context_headers() -> set[str]:
    """Every ``X-Context-*`` and ``X-Request-Id`` the proxy's code names, set or read."""
    return {s for tree in _proxy_trees() for s in _strings(tree) if CONTEXT_HEADER.fullmatch(s)}


def metric_names() -> set[str]:
    """The proxy's own metric names as ``/metrics`` exposes them (counters with their
    ``_total``); the standard collectors' are left to ``test_docs_name_the_standard_collectors``."""
    return {f.name + "_total" if f.type == "counter" else f.name
            for f in Metrics().registry.collect() if f.name.startswith("context_proxy_")}


def proxy_metric_names() -> set[str]:
    """The proxy's own metric families, as the registry names them (counters without
    ``_total``)."""
    return {f.name for f in Metrics().registry.collect() if f.name.startswith("context_proxy_")}


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
    # the scan finds what the proxy sets (named constants too), and the exclusions still name
    # real headers
    assert {"X-Conversation-Id", "X-Context-Compaction", "X-Rerank", "X-Request-Id",
            "X-Context-Compact-Ignored"} | UPSTREAM_ONLY <= headers
    docs = docs_text().lower()
    missing = sorted(h for h in headers - UPSTREAM_ONLY if f"`{h.lower()}`" not in docs)
    assert missing == []


def test_docs_name_every_context_header_the_code_names() -> None:
    """However the code spells them (a constant, a dict key, a header read), the proxy's own
    headers are documented, each as a whole name (``X-Context-Compact`` is not
    ``X-Context-Compaction``)."""
    headers = named_context_headers()
    assert {"X-Request-Id", "X-Context-Compact", "X-Context-Prefix-Kept"} <= headers
    docs = docs_text()
    assert sorted(h for h in headers
                  if not re.search(rf"`{re.escape(h)}(?![A-Za-z-])[^`]*`", docs)) == []


def test_docs_name_every_metric() -> None:
    names = metric_names()
    assert {"context_proxy_requests_total", "context_proxy_rerank_duration_seconds",
            "context_proxy_build_info", "context_proxy_upstream_errors_total"} <= names
    docs = docs_text()
    assert sorted(n for n in names if f"`{n}`" not in docs) == []


def test_docs_name_the_standard_collectors() -> None:
    """The process, platform and GC collectors' series: each named, or under a documented
    family (`` `process_*` ``)."""
    names = {f.name for f in Metrics().registry.collect()} - proxy_metric_names()
    assert {"process_cpu_seconds", "python_info", "python_gc_collections"} <= names
    docs = docs_text()
    families = tuple(re.findall(r"`([a-z_]+_)\*`", docs))
    assert sorted(n for n in names if not n.startswith(families)
                  and f"`{n}`" not in docs and f"`{n}_total`" not in docs) == []


def test_headers_set_in_ignores_headers_only_read() -> None:
    tree = ast.parse(
        'compact = request.headers.get("X-Context-Compact")\n'
        'h = {"X-Conversation-Id": cid, "content-type": "text/plain"}\n'
        'h["X-Context-Retried"] = "yes"\n'
        'seen = response.headers["X-Seen"]\n'
        'response.headers[REQUEST_ID] = rid\n'
        'extra = {manual.IGNORED: "off"}\n'
        'other = response.headers[UNKNOWN]\n')
    constants = {"REQUEST_ID": {"X-Request-Id"}, "IGNORED": {"X-Context-Compact-Ignored"},
                 "UNKNOWN": {"X-Unknown"}}
    assert headers_set_in(tree, constants) == {"X-Conversation-Id", "X-Context-Retried",
                                               "X-Request-Id", "X-Context-Compact-Ignored"}


def test_header_constants_are_module_level_header_strings() -> None:
    tree = ast.parse('REQUEST_ID = "X-Request-Id"\nPATH = "/chat"\n'
                     'def f():\n    LOCAL = "X-Local"\n')
    assert header_constants(tree) == {"REQUEST_ID": "X-Request-Id"}


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


def code_map_misses(readme: str, root: Path) -> list[str]:
    """Modules of ``proxy/`` the README's code map does not name in its package's line (the line
    that starts with the package folder, e.g. ``- `proxy/context/summary/`: ...``)."""
    import re

    section = readme.split("## Code map", 1)[1].split("\n### ", 1)[0]
    lines = {m.group(1): m.group(2) for m in re.finditer(
        r"^- `(proxy/(?:[\w]+/)*)`:(.*?)(?=^- `|\Z)", section, re.M | re.S)}
    missing = []
    for path in sorted((root / "proxy").rglob("*.py")):
        folder = str(path.parent.relative_to(root)) + "/"
        if path.name == "__init__.py" and folder != "proxy/":
            continue
        if f"`{path.name}`" not in lines.get(folder, ""):
            missing.append(str(path.relative_to(root)))
    return [m for m in missing if m != "proxy/__init__.py"]


def test_the_code_map_names_every_module() -> None:
    assert code_map_misses((ROOT / "README.md").read_text(), ROOT) == []


def test_a_module_missing_from_the_code_map_is_found(tmp_path: Path) -> None:
    (tmp_path / "proxy" / "store").mkdir(parents=True)
    for name in ("__init__.py", "app.py", "store/__init__.py", "store/keys.py"):
        (tmp_path / "proxy" / name).write_text("")
    readme = "## Code map\n\n- `proxy/`: `app.py`.\n- `proxy/store/`: `sqlite.py`.\n"
    assert code_map_misses(readme, tmp_path) == ["proxy/store/keys.py"]


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
