"""Column-level lineage of the SQL a flow loads, for the ``_lineage`` topic.

Pure: sqlglot only, no Kafka, no database. Every base table gets a neutral name (so that
``orders``, ``tpch.orders`` and ``read_parquet('x')`` resolve alike), sqlglot's optimizer
qualifies the columns and expands ``*`` from the given schema, and each output column is traced
through CTEs, subqueries and set operations down to the base-table columns it reads.

Example::

    lineage = derive_lineage("select o_orderkey, upper(c_name) as name from ...", "sales.orders",
                             schema={"orders": {"o_orderkey": "BIGINT"}, ...})
    value = json.dumps(lineage.to_json(commit_id)).encode()  # key: lineage.target
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, find_all_in_scope, traverse_scope
from sqlglot.schema import MappingSchema, normalize_name

from producer_lib.errors import ProducerLibError

__all__ = ["ColumnLineage", "Kind", "Lineage", "LineageError", "derive_lineage"]

Kind = Literal["copy", "expression"]
_SOURCE_ID = "__lineage_source_{}"  # the neutral name a base table gets while tracing
_ATOMIC = (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Null, exp.Boolean)


class LineageError(ProducerLibError):
    """The lineage of a load's SQL cannot be derived (parse error, unknown table or column)."""


@dataclass(frozen=True)
class ColumnLineage:
    """Where one target column comes from.

    Attributes:
        target: The column of the target table.
        sources: ``table.column`` of every source column it reads, sorted.
        kind: ``copy`` when it is one source column unchanged (a rename is still a copy; so is
            a UNION of copies), else ``expression``.
        expression: The SQL computing it, in terms of source columns; None for a copy.
    """

    target: str
    sources: tuple[str, ...]
    kind: Kind
    expression: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the column entry of the ``_lineage`` document."""
        return {**asdict(self), "sources": list(self.sources)}


@dataclass(frozen=True)
class Lineage:
    """The lineage of one load: source tables, target table and column mappings.

    Attributes:
        target: The target table, ``<namespace>.<name>``.
        sources: The base tables the SQL reads, as written in it, sorted.
        columns: One entry per target column, in the order of the result.
        sql: The SQL as given.
        dialect: The sqlglot dialect it was parsed with.
    """

    target: str
    sources: tuple[str, ...]
    columns: tuple[ColumnLineage, ...]
    sql: str
    dialect: str = "duckdb"

    def to_json(self, commit_id: str | None) -> dict[str, Any]:
        """Return the ``_lineage`` document (docs/WIRE.md) of the commit ``commit_id``."""
        columns = [column.to_json() for column in self.columns]
        document = {**asdict(self), "sources": list(self.sources), "columns": columns}
        return {**document, "commit_id": commit_id}


def derive_lineage(
    sql: str,
    target: str,
    *,
    schema: Mapping[str, Mapping[str, str]] | None = None,
    output_columns: Sequence[str] | None = None,
    dialect: str = "duckdb",
) -> Lineage:
    """Derive the source tables and column mappings of the SQL loaded into ``target``.

    Args:
        sql: One SELECT (CTEs, joins, subqueries, set operations allowed).
        target: The target table, ``<namespace>.<name>``.
        schema: Columns (name → type) of the tables, keyed as the SQL names them
            (``orders``, ``tpch.orders``; matched exactly, else case-insensitively). Expands
            ``*`` and resolves unqualified columns of joins.
        output_columns: The columns of the loaded result, in order. They name the target
            columns; with one source table they also stand in for a ``*`` it has no schema for.
        dialect: The sqlglot dialect of ``sql``.

    Raises:
        LineageError: The SQL does not parse, is not a query, or names a column whose table
            cannot be told (give that table's schema).
    """
    tree = _parse(sql, target, dialect)
    outputs = {_normalize(column, dialect): column for column in output_columns or ()}
    written = {**outputs, **_written_names(tree, dialect)}  # the SQL's spelling comes first
    sources = _name_sources(tree, schema or {}, dialect)
    root = _qualified_scope(tree, sources, target, dialect)
    tracer = _Tracer(sources, written, target, dialect)
    plans = _plan(root, output_columns, target, dialect)
    columns = tuple(tracer.output(root, *plan) for plan in plans)
    names = tuple(sorted({source.name for source in sources.values()}))
    return Lineage(target, names, columns, sql, dialect)


@dataclass(frozen=True)
class _Source:
    """A base table: its name as written, its reference for rendering, its known columns."""

    name: str
    reference: exp.Table | None  # None for table functions such as read_parquet('...')
    columns: Mapping[str, str]  # normalized → as in the schema; empty when unknown

    def column(self, normalized: str, written: Mapping[str, str]) -> str:
        """Return a column name as the schema, else the SQL, writes it."""
        return self.columns.get(normalized) or written.get(normalized, normalized)

    def column_node(self, normalized: str, written: Mapping[str, str]) -> exp.Column:
        """Return a column of this table as written, for the SQL of an expression."""
        column = exp.to_identifier(self.column(normalized, written))
        if self.reference is None:  # `read_parquet('x').a` is no valid SQL
            return exp.Column(this=column)
        parts = self.reference.copy().args
        return exp.Column(
            this=column, table=parts["this"], db=parts.get("db"), catalog=parts.get("catalog")
        )


@dataclass(frozen=True)
class _Trace:
    """What one column of a scope reads: (source id, normalized column) pairs, and how."""

    columns: frozenset[tuple[str, str]]
    copy: bool
    expression: exp.Expr


def _parse(sql: str, target: str, dialect: str) -> exp.Query:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except SqlglotError as exc:
        raise LineageError(f"Cannot parse the SQL: {exc}", target=target) from exc
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise LineageError("The SQL must be exactly one query (SELECT)", target=target)
    return statements[0]


def _normalize(name: str | exp.Identifier, dialect: str) -> str:
    """Normalize as ``dialect`` resolves it; a str is an exact (catalog) name, as if quoted."""
    identifier = exp.to_identifier(name, quoted=True) if isinstance(name, str) else name
    return normalize_name(identifier, dialect=dialect).name


def _written_names(tree: exp.Expr, dialect: str) -> dict[str, str]:
    """Map each normalized identifier of the SQL to its first spelling there."""
    identifiers = reversed(list(tree.find_all(exp.Identifier)))  # the first spelling wins
    return {_normalize(identifier, dialect): identifier.name for identifier in identifiers}


def _name_sources(
    tree: exp.Expr, schema: Mapping[str, Mapping[str, str]], dialect: str
) -> dict[str, _Source]:
    """Give every base-table reference a neutral name; return the sources by that name."""
    ctes = {_normalize(cte.args["alias"].this, dialect) for cte in tree.find_all(exp.CTE)}
    ids: dict[str, str] = {}
    sources: dict[str, _Source] = {}
    for table in list(tree.find_all(exp.Table)):
        named = isinstance(table.this, exp.Identifier)
        if named and not table.db and _normalize(table.this, dialect) in ctes:
            continue
        name = (
            ".".join(part.name for part in table.parts)
            if named
            else table.this.sql(dialect, normalize_functions="lower")
        )
        source_id = ids.setdefault(name.casefold(), _SOURCE_ID.format(len(ids)))
        if source_id not in sources:
            columns = {_normalize(c, dialect): c for c in _schema_of(schema, name)}
            sources[source_id] = _Source(name, table.copy() if named else None, columns)
        if named and not table.alias:
            table.set("alias", exp.TableAlias(this=table.this.copy()))
        table.set("this", exp.to_identifier(source_id))
        table.set("db", None)
        table.set("catalog", None)
    return sources


def _schema_of(schema: Mapping[str, Mapping[str, str]], name: str) -> Mapping[str, str]:
    folded = {key.casefold(): columns for key, columns in schema.items()}
    return schema[name] if name in schema else folded.get(name.casefold(), {})


def _qualified_scope(
    tree: exp.Query, sources: Mapping[str, _Source], target: str, dialect: str
) -> Scope:
    mapping: dict[str, object] = {
        source_id: dict.fromkeys(source.columns, "UNKNOWN")  # types play no part here
        for source_id, source in sources.items()
        if source.columns
    }
    try:
        qualified = qualify(
            tree,
            dialect=dialect,
            schema=MappingSchema(mapping, dialect=dialect, normalize=False),
            validate_qualify_columns=False,
            identify=False,
        )
        return traverse_scope(qualified)[-1]  # the root: a query always has one
    except SqlglotError as exc:
        message = f"Cannot resolve the columns of the SQL (give its tables' schema): {exc}"
        raise LineageError(message, target=target) from exc


def _plan(
    root: Scope, output_columns: Sequence[str] | None, target: str, dialect: str
) -> list[tuple[str | None, str, int | None]]:
    """List (target name if known, name in the SQL, position if reliable) per output."""
    query = root.expression
    if not isinstance(query, exp.Query):  # the root of a query's scopes is that query
        raise LineageError("The SQL is not a query", target=target)
    selects = query.selects
    if not any(select.is_star for select in selects):
        names = [select.alias_or_name for select in selects]
        if output_columns is not None and len(output_columns) != len(names):
            message = f"The SQL selects {len(names)} columns but the result has"
            raise LineageError(f"{message} {list(output_columns)}", target=target)
        given = list(output_columns) if output_columns is not None else [None] * len(names)
        return [(given[i], name, i) for i, name in enumerate(names)]
    if output_columns is None:
        raise LineageError(
            "Cannot expand `*`: give the schema of its table or the output columns", target=target
        )
    return [(column, _normalize(column, dialect), None) for column in output_columns]


@dataclass
class _Tracer:
    """Traces output columns through the scopes of one qualified query."""

    sources: Mapping[str, _Source]
    written: Mapping[str, str]  # normalized identifier → as written in the SQL
    target: str
    dialect: str
    _active: set[tuple[int, str, int | None]] = field(default_factory=set)

    def output(self, root: Scope, given: str | None, name: str, index: int | None) -> ColumnLineage:
        """Return the lineage of one output column of ``root``."""
        trace = self.trace(root, name, index)
        sources = tuple(sorted({self._source_column(*column) for column in trace.columns}))
        if trace.copy:
            source_id, column = next(iter(trace.columns))
            same = column == name and len(trace.columns) == 1
            target = given or (
                self.sources[source_id].column(column, self.written)
                if same
                else self.written.get(name, name)
            )
            return ColumnLineage(target, sources, "copy")
        target = given or self.written.get(name, name)
        return ColumnLineage(target, sources, "expression", self.render(trace.expression))

    def trace(self, scope: Scope, name: str, index: int | None = None) -> _Trace:
        """Trace column ``name`` (or the ``index``-th) of ``scope`` to base-table columns."""
        key = (id(scope), name, index)
        if key in self._active:  # a recursive CTE reading itself
            return _Trace(frozenset(), False, exp.column(name))
        self._active.add(key)
        try:
            expression = scope.expression
            if isinstance(expression, exp.SetOperation):
                return self._set_operation(scope, expression, name, index)
            if isinstance(expression, exp.Select):
                return self._select(scope, expression, name, index)
            return _Trace(frozenset(), False, exp.column(name))  # VALUES, table functions
        finally:
            self._active.discard(key)

    def render(self, expression: exp.Expr) -> str:
        """Return the SQL of ``expression`` with source tables and columns as written."""

        def restore(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column) and node.table in self.sources:
                return self.sources[node.table].column_node(node.name, self.written)
            if isinstance(node, exp.Table) and node.name in self.sources:
                reference = self.sources[node.name].reference
                parts = reference.copy().args if reference is not None else {}
                node = node.copy()
                for key in ("this", "db", "catalog") if parts else ():
                    node.set(key, parts.get(key))
            return node

        return expression.transform(restore).sql(dialect=self.dialect)

    def _source_column(self, source_id: str, column: str) -> str:
        source = self.sources[source_id]
        return f"{source.name}.{source.column(column, self.written)}"

    def _set_operation(
        self, scope: Scope, operation: exp.SetOperation, name: str, index: int | None
    ) -> _Trace:
        named = operation.named_selects
        if index is None and name in named and "*" not in named:
            index = named.index(name)
        traces = [self.trace(branch, name, index) for branch in scope.set_operation_scopes]
        columns = frozenset().union(*(trace.columns for trace in traces))
        copy = all(trace.copy for trace in traces)
        if copy and len(columns) == 1:
            return traces[0]
        keyword = operation.key.upper() + ("" if operation.args.get("distinct") else " ALL")
        texts = dict.fromkeys(self.render(trace.expression) for trace in traces)
        return _Trace(columns, copy, exp.Paren(this=exp.Var(this=f" {keyword} ".join(texts))))

    def _select(self, scope: Scope, query: exp.Select, name: str, index: int | None) -> _Trace:
        select = _find_select(query, name, index)
        if select is None:
            return self._star(scope, query, name)
        inner = select.unalias()
        traces = {
            (column.table, column.name): self._column(scope, column)
            for column in find_all_in_scope(inner, exp.Column)
            if not column.is_star
        }
        if isinstance(inner, exp.Column) and len(traces) == 1:
            return next(iter(traces.values()))  # passed through: a copy stays a copy
        nested = self._nested(scope, inner)
        columns = nested.union(*(trace.columns for trace in traces.values()))
        return _Trace(columns, False, inner.transform(lambda node: _inline(node, traces)))

    def _nested(self, scope: Scope, inner: exp.Expr) -> frozenset[tuple[str, str]]:
        """Return the columns the scalar subqueries of ``inner`` read."""
        scopes = {id(sub.expression): sub for sub in scope.subquery_scopes}
        columns: set[tuple[str, str]] = set()
        for query in find_all_in_scope(inner, *exp.UNWRAPPED_QUERIES):
            sub = scopes.get(id(query))
            if sub is None:
                continue
            for name in query.named_selects:
                columns |= self.trace(sub, name).columns
        return frozenset(columns)

    def _column(self, scope: Scope, column: exp.Column) -> _Trace:
        source = self._source_of(scope, column)
        if isinstance(source, Scope):
            return self.trace(source, column.name)
        if isinstance(source, exp.Table) and source.name in self.sources:
            return self._base_column(source.name, column.name)
        return _Trace(frozenset(), False, column.copy())

    def _source_of(self, scope: Scope, column: exp.Column) -> exp.Table | Scope | None:
        if not column.table:
            if len(scope.sources) == 1:
                return next(iter(scope.sources.values()))
            name = self.written.get(column.name, column.name)
            message = f"Cannot tell which of {self._aliases(scope)} column {name!r} comes from"
            raise LineageError(f"{message}: give their schema", target=self.target, column=name)
        outer: Scope | None = scope
        while outer is not None:  # a correlated subquery reads the columns of outer scopes
            if column.table in outer.sources:
                return outer.sources[column.table]
            outer = outer.parent
        raise LineageError(
            f"Unknown table {column.table!r} for column {column.name!r}", target=self.target
        )

    def _aliases(self, scope: Scope) -> list[str]:
        return sorted(self.written.get(alias, alias) for alias in scope.sources)

    def _base_column(self, source_id: str, column: str) -> _Trace:
        source = self.sources[source_id]
        if source.columns and column not in source.columns:
            raise LineageError(
                f"Column {column!r} is not in the schema of {source.name}",
                target=self.target,
                table=source.name,
            )
        return _Trace(frozenset({(source_id, column)}), True, exp.column(column, source_id))

    def _star(self, scope: Scope, query: exp.Select, name: str) -> _Trace:
        """Trace ``name`` through a ``*`` that had no schema to expand it."""
        stars = [select for select in query.selects if select.is_star]
        if not stars:
            raise LineageError(
                f"No column {name!r} in the SQL",
                target=self.target,
                column=self.written.get(name, name),
            )
        aliases = {
            star.table if isinstance(star, exp.Column) and star.table else alias
            for star in stars
            for alias in scope.sources
        }
        if len(aliases) != 1:
            message = f"Cannot expand `*` over {self._aliases(scope)}: give their schema"
            raise LineageError(message, target=self.target)
        return self._column(scope, exp.column(name, aliases.pop()))


def _find_select(query: exp.Select, name: str, index: int | None) -> exp.Expr | None:
    if index is not None and not query.is_star and index < len(query.selects):
        return query.selects[index]
    return next((s for s in query.selects if s.alias_or_name == name and not s.is_star), None)


def _inline(node: exp.Expr, traces: Mapping[tuple[str, str], _Trace]) -> exp.Expr:
    """Replace a column of a scope by what it computes from base-table columns."""
    trace = traces.get((node.table, node.name)) if isinstance(node, exp.Column) else None
    if trace is None:
        return node
    expression = trace.expression.copy()
    return expression if isinstance(expression, _ATOMIC) else exp.Paren(this=expression)
