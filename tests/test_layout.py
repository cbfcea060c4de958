"""Architecture checks: the package's import graph and module sizes stay the way they are meant.

Imports are read with ``ast`` (nothing is imported): ``import a.b`` and ``from a.b import c``
(``a.b.c`` when that is a module), at any depth (inside functions too), except under
``if TYPE_CHECKING:``, which never runs.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from store_use import left_out, store_openers

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400
STAGES = "proxy.context.stages"
# What a pure stage may not import directly: I/O, the event loop, the store, metrics, the
# network, and the context modules that wrap them.
STAGE_FORBIDDEN = (
    "proxy.store", "proxy.upstream", "proxy.http", "proxy.metrics", "proxy.context.offload",
    "proxy.context.records.compactions", "proxy.context.managed",
    "proxy.context.summary.summarizer",
    "proxy.context.tokens.window", "proxy.state", "proxy.app",
    "aiohttp", "asyncio", "sqlite3", "prometheus_client", "litellm",
)


def module_name(path: Path, root: Path = ROOT) -> str:
    """``proxy/context/__init__.py`` -> ``proxy.context``; ``proxy/store.py`` -> ``proxy.store``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path = ROOT, package: str = "proxy") -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
        else:
            yield from _runtime_nodes(child)


def imports_of(source: str, module: str, is_package: bool, known: Mapping[str, Path]
               ) -> set[str]:
    """Fully qualified names of the modules ``source`` (the module ``module``) imports."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, one level up per dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[:len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return found


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``import a.b.c``: the longest known prefix)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for imported in imports_of(path.read_text(), name, path.name == "__init__.py", modules):
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                targets.add(".".join(parts))
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (depth-first search, in name order)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def _forbidden(imported: str, prefixes: tuple[str, ...]) -> bool:
    return any(imported == p or imported.startswith(p + ".") for p in prefixes)


MODULES = package_modules()


def _direct_imports(name: str) -> set[str]:
    path = MODULES[name]
    return imports_of(path.read_text(), name, path.name == "__init__.py", MODULES)


# --- the helpers themselves (so the checks below can fail) -----------------------------------


def test_imports_of_resolves_submodules_and_skips_type_checking() -> None:
    known = {n: Path(n) for n in ("proxy", "proxy.a", "proxy.a.b", "proxy.c")}
    source = (
        "from typing import TYPE_CHECKING\n"
        "import os.path\n"
        "from proxy.a import b, helper\n"
        "from .. import c\n"
        "if TYPE_CHECKING:\n    import proxy.hidden\nelse:\n    import json\n"
        "def f() -> None:\n    import sqlite3\n"
    )
    assert imports_of(source, "proxy.a.x", False, known) == {
        "typing", "os.path", "proxy.c", "proxy.a.b", "proxy.a", "json", "sqlite3"}


def test_find_cycle_reports_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# --- the package ---------------------------------------------------------------------------


def test_the_package_is_found() -> None:
    assert {"proxy", "proxy.app", "proxy.store", STAGES} <= set(MODULES)


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph(MODULES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


ADAPTERS = "proxy.context.adapters"  # pure like the stages: they only reshape requests
STAGE_MODULES = sorted(n for n in MODULES if any(n == p or n.startswith(p + ".")
                                                 for p in (STAGES, ADAPTERS)))


@pytest.mark.parametrize("name", STAGE_MODULES)
def test_stages_import_nothing_that_does_io(name: str) -> None:
    bad = sorted(i for i in _direct_imports(name) if _forbidden(i, STAGE_FORBIDDEN))
    assert bad == [], f"{name} imports {bad}"


@pytest.mark.parametrize("name", STAGE_MODULES)
def test_stages_are_synchronous(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text())
    coroutines = [f"{n.name} (line {n.lineno})" for n in ast.walk(tree)
                  if isinstance(n, ast.AsyncFunctionDef)]
    assert coroutines == [], f"{name} defines async functions: {coroutines}"


def test_no_module_is_over_the_line_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines: {over}"


def test_http_handlers_never_import_the_app() -> None:
    handlers = [n for n in MODULES if n == "proxy.http" or n.startswith("proxy.http.")]
    assert handlers
    bad = {n: sorted(i for i in _direct_imports(n) if _forbidden(i, ("proxy.app",)))
           for n in handlers}
    assert {n: i for n, i in bad.items() if i} == {}


def test_test_folders_are_not_packages_and_test_names_are_unique() -> None:
    """Test files are imported by their basename (pytest's rootdir/prepend mode, folders without
    ``__init__.py``: a ``tests/http`` package would shadow the standard library's ``http``), so
    no folder under tests/ is a package and each basename is used once."""
    tests = ROOT / "tests"
    assert sorted(str(p.relative_to(ROOT)) for p in tests.rglob("__init__.py")) == []
    names = Counter(p.name for p in tests.rglob("*.py"))
    assert {name: n for name, n in names.items() if n > 1} == {}


# The layers of the package, lowest first: a module may import its own package and the layers
# below its own, never one beside or above it. The pure adapters of ``proxy.context`` sit below
# the API modules that name them; the stages are part of ``proxy.context``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("proxy.errors", "proxy.metrics"),
    ("proxy.store",),
    ("proxy.policy",),
    ("proxy.settings", "proxy.auth"),
    ("proxy.upstream",),
    ("proxy.context.adapters",),
    ("proxy.apis",),
    ("proxy.context", "proxy.rerank"),
    ("proxy.state",),
    ("proxy.http", "proxy.console"),
    ("proxy.app",),
    ("proxy.testing",),
    ("proxy.cli",),
)


def layer_of(module: str) -> tuple[int, str] | None:
    """(rank, package) of a module of ``proxy``; ``None`` for the package itself."""
    for rank, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return rank, package
    return None


def upward_imports(modules: Mapping[str, Path]) -> list[str]:
    found = []
    for name, path in sorted(modules.items()):
        mine = layer_of(name)
        if mine is None:
            continue
        for imported in sorted(imports_of(path.read_text(), name, path.name == "__init__.py",
                                          modules)):
            theirs = layer_of(imported)
            if theirs is not None and theirs[1] != mine[1] and theirs[0] >= mine[0]:
                found.append(f"{name} imports {imported}")
    return found


def test_every_module_has_a_layer() -> None:
    assert [n for n in MODULES if n != "proxy" and layer_of(n) is None] == []


def test_no_module_imports_a_layer_beside_or_above_its_own() -> None:
    assert upward_imports(MODULES) == []


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    # A store module that reached up into the HTTP handlers would be reported.
    (tmp_path / "proxy" / "store").mkdir(parents=True)
    (tmp_path / "proxy" / "http").mkdir()
    for name in ("__init__.py", "store/__init__.py", "http/__init__.py", "http/parse.py"):
        (tmp_path / "proxy" / name).write_text("")
    (tmp_path / "proxy" / "store" / "rows.py").write_text("from proxy.http import parse\n")
    found = upward_imports(package_modules(tmp_path))
    assert found == ["proxy.store.rows imports proxy.http.parse"]


MAX_MODULES_PER_FOLDER = 12


def crowded_folders(root: Path = ROOT) -> dict[str, int]:
    """Package folders with more than ``MAX_MODULES_PER_FOLDER`` modules at one level
    (``__init__.py`` and ``__main__.py`` aside)."""
    counts = Counter(str(p.parent.relative_to(root)) for p in (root / "proxy").rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    return {folder: n for folder, n in sorted(counts.items()) if n > MAX_MODULES_PER_FOLDER}


def shared_module_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Module basenames used in more than one folder of ``proxy`` (a reader, a traceback or a
    grep then has to ask which ``service.py`` is meant)."""
    where: dict[str, list[str]] = {}
    for p in sorted((root / "proxy").rglob("*.py")):
        if p.name not in ("__init__.py", "__main__.py"):
            where.setdefault(p.name, []).append(str(p.relative_to(root)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_package_folder_is_crowded() -> None:
    assert crowded_folders() == {}


def test_no_two_modules_share_a_name() -> None:
    assert shared_module_names() == {}


def test_crowding_and_shared_names_are_found(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / "proxy" / folder).mkdir(parents=True)
        (tmp_path / "proxy" / folder / "service.py").write_text("")
    for i in range(MAX_MODULES_PER_FOLDER):
        (tmp_path / "proxy" / "a" / f"m{i}.py").write_text("")
    assert crowded_folders(tmp_path) == {"proxy/a": MAX_MODULES_PER_FOLDER + 1}
    assert shared_module_names(tmp_path) == {
        "service.py": ["proxy/a/service.py", "proxy/b/service.py"]}


# --- a unit test file per module ----------------------------------------------------------------
# Every module that defines a function or a class has a test file of its own, at the mirror of
# its path (``proxy/a/b.py``: ``tests/a/test_b.py``; a package's ``__init__.py``:
# ``tests/a/test_a.py``; where two modules would share a file name, the package's name goes
# first: ``tests/a/test_a_b.py``). That file imports the module and never starts the proxy: no
# harness, no replicas, no console, none of the fixtures that serve one. It may still use the
# fake upstream, a PostgreSQL server or a SQLite file: only the proxy is left out.

SERVES_THE_PROXY = ("proxy.testing.harness", "proxy.testing.replicas", "proxy.cli.demo_serve")
SERVING_FIXTURES = frozenset({
    "harness", "make_harness", "key", "client", "aclient", "sdk", "start_console", "console",
    "page", "browser", "replicas", "admin"})


def defines_code(path: Path) -> bool:
    """Whether a module defines a function or a class (a module of constants, or one that only
    re-exports or runs ``main``, has nothing of its own to test)."""
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               for n in ast.walk(ast.parse(path.read_text())))


def unit_test_paths(module: str, path: Path) -> list[Path]:
    """Where ``module``'s unit test may live: the mirror path, or the one with its package's
    name first (for a name another package's module also has)."""
    parts = module.split(".")[1:]
    if path.name == "__init__.py":
        folder, name = parts, parts[-1] if parts else "proxy"
    else:
        folder, name = parts[:-1], parts[-1]
    base = ROOT / "tests" / Path(*folder) if folder else ROOT / "tests"
    candidates = [base / f"test_{name}.py"]
    if path.name != "__init__.py":
        candidates.append(base / f"test_{folder[-1] if folder else 'proxy'}_{name}.py")
    return candidates


def _parametrized(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names: set[str] = set()
    for deco in fn.decorator_list:
        if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "parametrize" and deco.args
                and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str)):
            names.update(n.strip() for n in deco.args[0].value.split(","))
    return names


def _is_fixture(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("fixture" in ast.unparse(deco) for deco in fn.decorator_list)


def serving_fixtures(source: str) -> set[str]:
    """The fixtures that start the proxy which a test file's tests and fixtures ask for
    (parametrized arguments, and fixtures the file defines itself, aside)."""
    functions = [n for n in ast.walk(ast.parse(source))
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    own = {f.name for f in functions if _is_fixture(f)}
    asked: set[str] = set()
    for fn in functions:
        if fn.name.startswith("test") or _is_fixture(fn):
            params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
            asked |= params - _parametrized(fn) - own
    return asked & SERVING_FIXTURES


def _file_problems(name: str, test: Path, modules: Mapping[str, Path]) -> list[str]:
    """Why ``test`` is not ``name``'s unit test file (none: it is)."""
    source = test.read_text()
    imported = imports_of(source, test.stem, False, modules)
    where = test.relative_to(ROOT)
    problems = [] if name in imported else [f"{name}: {where} does not import it"]
    serving = sorted({i for i in imported if _forbidden(i, SERVES_THE_PROXY) and i != name}
                     | serving_fixtures(source))
    if serving:
        problems.append(f"{name}: {where} starts the proxy ({', '.join(serving)})")
    return problems


def unit_test_problems(modules: Mapping[str, Path]) -> list[str]:
    """For each module with code: no file at its test paths, or none that is its unit test
    file (the first path's problems are reported)."""
    problems = []
    for name, path in sorted(modules.items()):
        if not defines_code(path):
            continue
        found = [c for c in unit_test_paths(name, path) if c.exists()]
        if not found:
            wanted = unit_test_paths(name, path)[0].relative_to(ROOT)
            problems.append(f"{name}: no unit test file ({wanted})")
            continue
        each = [_file_problems(name, test, modules) for test in found]
        if all(each):
            problems += each[0]
    return problems


def test_every_module_has_a_unit_test_file_that_leaves_the_proxy_unstarted() -> None:
    assert unit_test_problems(MODULES) == []


def test_a_module_without_its_unit_test_file_is_found() -> None:
    known = {"proxy.store.leases": ROOT / "proxy" / "store" / "leases.py",
             "proxy.no_such_module": ROOT / "proxy" / "store" / "leases.py"}
    assert unit_test_problems(known) == [
        "proxy.no_such_module: no unit test file (tests/test_no_such_module.py)"]
    assert unit_test_paths("proxy.upstream.relay", ROOT / "proxy/upstream/relay.py") == [
        ROOT / "tests/upstream/test_relay.py", ROOT / "tests/upstream/test_upstream_relay.py"]
    assert unit_test_paths("proxy.store", ROOT / "proxy/store/__init__.py") == [
        ROOT / "tests/store/test_store.py"]


def test_a_unit_test_file_that_starts_the_proxy_is_found() -> None:
    source = ('import pytest\n@pytest.fixture\ndef admin(): ...\n'
              '@pytest.mark.parametrize("key", ["a"])\n'
              'def test_a(key, harness, admin, tmp_path): ...\n'
              'async def test_b(aclient): ...\n'
              'def helper(client, sdk): ...\n')
    assert serving_fixtures(source) == {"harness", "aclient"}


# --- the PostgreSQL run leaves out no test that opens a store -----------------------------------
# ``pytest --store=postgres`` runs only the tests on the suite's store (tests/store_use.py); a
# test that opens a store without being one of them, nor marked ``own_store``, fails the
# collection (conftest.py), and this test, over what the session collected.

def test_what_opens_a_store_is_found_through_helpers_and_fixtures() -> None:
    source = ('import subprocess, pytest\n'
              'def helper(p): return Store(p)\n'
              'def cli(): subprocess.run(["python", "-m", "proxy.cli", "keys", "list"])\n'
              '@pytest.fixture\ndef served(tmp_path): return Harness(tmp_path).start()\n'
              'def test_direct(tmp_path): store.Store(tmp_path / "x.db").close()\n'
              'def test_helper(tmp_path): helper(tmp_path)\n'
              'def test_cli(): cli()\n'
              'def test_fixture(served): ...\n'
              'def test_app(settings): return create_app(settings)\n'
              'def test_pure(tmp_path): assert tmp_path\n')
    assert store_openers(source) == {"helper", "cli", "served", "test_direct", "test_helper",
                                     "test_cli", "test_fixture", "test_app"}


def test_every_test_that_opens_a_store_is_in_the_postgresql_run_or_marked(
        request: pytest.FixtureRequest) -> None:
    assert left_out(request.session.items) == []


# --- every skip goes through need() -------------------------------------------------------------
# ``need()`` (tests/needs.py) skips for a missing tool, or fails under
# ``CONTEXT_PROXY_REQUIRE_ALL=1`` (CI: nothing may be skipped); a plain skip would bypass it.

SKIPS = frozenset({"skip", "skipif", "importorskip"})


def plain_skips(source: str) -> list[int]:
    """The lines of ``source`` that skip without ``need()``: ``pytest.skip(...)``,
    ``pytest.importorskip(...)``, ``pytest.mark.skip``/``skipif``."""
    return sorted(n.lineno for n in ast.walk(ast.parse(source))
                  if isinstance(n, ast.Attribute) and n.attr in SKIPS
                  and ast.unparse(n.value) in ("pytest", "pytest.mark"))


def test_every_skip_goes_through_need() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "tests").rglob("*.py"))
             if p.name != "needs.py" and (lines := plain_skips(p.read_text()))}
    assert found == {}


def test_a_plain_skip_is_found() -> None:
    source = ('import pytest\npytestmark = pytest.mark.skipif(True, reason="x")\n'
              'def test_a():\n    pytest.skip("no")\n'
              'np = pytest.importorskip("numpy")\n'
              'def test_b():\n    need("tool", "install it")\n')
    assert plain_skips(source) == [2, 4, 5]
