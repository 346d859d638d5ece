"""Imports go one way: no module of the library or the writer imports one that imports it back.

Imports under ``if TYPE_CHECKING:`` are left out (they are never run); imports inside
functions count (they run, later). In ``producer_lib`` the type-only imports count too: a
loop of names is a loop a reader follows, whether or not Python runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("producer_lib", "lakehouse_writer")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run_time_imports(path: Path, modules: set[str], type_only: bool = False) -> set[str]:
    """The modules of ``modules`` that ``path`` imports when it runs (and for types, if asked)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = node.body if type_only else []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found |= subs if subs else {node.module} & modules
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names} & modules
    return found


def import_graph(
    packages: tuple[str, ...] = PACKAGES, type_only: bool = False
) -> dict[str, set[str]]:
    """Module → the modules of ``packages`` it imports at run time (not its packages).

    ``type_only``: the imports under ``if TYPE_CHECKING:`` count as well.
    """
    paths = [p for pkg in packages for p in (ROOT / pkg).rglob("*.py")]
    modules = {_module_name(p) for p in paths}
    graph = {}
    for path in paths:
        name = _module_name(path)
        graph[name] = {m for m in _run_time_imports(path, modules, type_only) if m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_loop_and_only_the_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    assert "lakehouse_writer.job" in graph  # the walk found the packages
    assert cycles(graph) == []


def test_producer_lib_has_no_loop_even_through_type_only_imports() -> None:
    graph = import_graph(("producer_lib",), type_only=True)
    assert "producer_lib.runner.runs" in graph["producer_lib.runner.runner"]  # http serves
    assert cycles(graph) == []


@pytest.mark.parametrize(
    "module", ["read.scan", "read.decode", "engines.spark.reload", "read.summary", "read.framing"]
)
def test_the_writer_reads_and_decodes_without_the_apply_step(module: str) -> None:
    """Reading and decoding come before applying: they never import ``apply``'s internals."""
    imported = import_graph()[f"lakehouse_writer.{module}"]
    apply = "lakehouse_writer.engines.spark.apply"
    allowed = {apply} if module == "engines.spark.reload" else set()  # it applies too
    assert imported & {apply} <= allowed
