"""Imports go one way: no module of the library or the writer imports one that imports it back.

Imports under ``if TYPE_CHECKING:`` are left out (they are never run); imports inside
functions count (they run, later). In ``producer_lib`` the type-only imports count too: a
loop of names is a loop a reader follows, whether or not Python runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
    assert "lakehouse_writer.stream.job" in graph  # the walk found the packages
    assert cycles(graph) == []


def test_producer_lib_has_no_loop_even_through_type_only_imports() -> None:
    graph = import_graph(("producer_lib",), type_only=True)
    assert "producer_lib.runner.runs" in graph["producer_lib.runner.runner"]  # http serves
    assert cycles(graph) == []


# The writer's packages in the order a batch meets them, the ground they stand on first. A module
# may import its own package and those before it, never one after: reading knows nothing of how
# rows are applied, an engine nothing of how its result is committed or routed.
WRITER_LAYERS = (
    "errors",
    "runtime",  # Spark session, storage, jars, the status file, the failure report
    "tables",  # the Delta tables: naming, creation, maintenance
    "settings",
    "rules",  # the row-type rules as SQL, one text for every engine
    "read",  # Kafka to decoded rows, per table
    "engines",  # a table's rows into its Delta table: Spark, delta-rs
    "commit",  # the batch's own records: state, commits, rejected rows, checkpoint guard
    "route",  # which engine and read path takes which table
    "stream",  # the query and its micro-batch: the steps above, in order
    "ops",  # what operators run beside the job: status page, watch, admin
    "cli",
    "__main__",
)


def _writer_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "lakehouse_writer" or len(parts) == 1:
        return None  # the package's __init__ re-exports from every layer
    return WRITER_LAYERS.index(parts[1])


def test_every_writer_module_has_a_layer() -> None:
    writer = [m for m in import_graph() if m.startswith("lakehouse_writer.")]
    assert {m.split(".")[1] for m in writer} <= set(WRITER_LAYERS)


def test_the_writer_imports_only_along_the_way_a_batch_travels() -> None:
    """No writer module imports one of a later layer (``WRITER_LAYERS``)."""
    backward = []
    for module, imported in sorted(import_graph().items()):
        here = _writer_layer(module)
        if here is None:
            continue
        for other in sorted(imported):
            there = _writer_layer(other)
            if there is not None and there > here:
                backward.append(f"{module} -> {other}")
    assert backward == []


def test_the_layer_check_sees_a_backward_import() -> None:
    assert _writer_layer("lakehouse_writer.read.scan") < _writer_layer(
        "lakehouse_writer.engines.spark.engine"
    )
    assert _writer_layer("lakehouse_writer.commit.state") > _writer_layer(
        "lakehouse_writer.engines.ids"
    )
