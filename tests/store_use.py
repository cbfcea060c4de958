"""Which tests the PostgreSQL run (``pytest --store=postgres``) takes, and the check that none
is left out by mistake.

The run repeats only the tests whose store is the one the suite's ``--store`` chooses: those
whose fixtures reach ``database_url`` (``make_harness``, ``store_target``, ``make_app``...;
through ``CONTEXT_PROXY_DATABASE_URL`` it also reaches a ``Harness``, a replica or a CLI run the
test starts itself) or ``new_store``. A test that starts a store another way requests
``database_url`` itself (``@pytest.mark.usefixtures("database_url")``); one that picks its store
on purpose (a SQLite file, a schema of its own: the same in both runs) says so with
``@pytest.mark.own_store``. Every other test is the same in both runs and runs once.

The check: a test that opens a store (constructs a ``Store``, ``Harness`` or ``Replicas``,
starts the application, runs ``proxy.cli``: itself, through a function or a fixture of its
module) must be in the PostgreSQL run or be marked ``own_store``; else collection fails.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

STORE_FIXTURES = frozenset({"database_url", "new_store"})
# Calls that open a store: the store itself, what serves the proxy, the application's start-up,
# the command line in process (``main``), and any run of ``proxy.cli`` (a string constant).
OPENERS = frozenset({"Store", "Harness", "Replicas", "create_app", "started", "main"})
CLI_MODULE = "proxy.cli"


def on_the_suite_store(item: pytest.Item) -> bool:
    """Whether ``item`` uses the store ``--store`` chooses (its fixtures reach one of
    ``STORE_FIXTURES``, and it is not marked ``own_store``): the PostgreSQL run takes exactly
    these."""
    return (not STORE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
            and item.get_closest_marker("own_store") is None)


def _opens_directly(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name in OPENERS:
                return True
        elif isinstance(node, ast.Constant) and node.value == CLI_MODULE:
            return True
    return False


def store_openers(source: str) -> frozenset[str]:
    """The functions of a module (tests, helpers, fixtures) that open a store: directly, or by
    calling or requesting (a parameter of the same name) another of them."""
    functions = [n for n in ast.walk(ast.parse(source))
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    found = {f.name for f in functions if _opens_directly(f)}
    grew = True
    while grew:
        grew = False
        for f in functions:
            if f.name in found:
                continue
            used = {a.arg for a in f.args.args + f.args.kwonlyargs} | {
                n.func.id for n in ast.walk(f)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            if not used.isdisjoint(found):
                found.add(f.name)
                grew = True
    return frozenset(found)


@functools.cache
def _openers_of(path: str) -> frozenset[str]:
    return store_openers(Path(path).read_text())


def left_out(items: list[pytest.Item]) -> list[str]:
    """The node ids of the tests that open a store yet are neither in the PostgreSQL run nor
    marked ``own_store``."""
    missed = []
    for item in items:
        fn = getattr(item, "function", None)
        if fn is None or on_the_suite_store(item) or item.get_closest_marker("own_store"):
            continue
        if fn.__name__ in _openers_of(str(item.path)):
            missed.append(item.nodeid)
    return missed
