"""What a source's data dictionary says about a table: keys and comments.

Readers query their catalog (Postgres ``pg_constraint``, Oracle ``ALL_CONSTRAINTS`` ...) into a
:class:`DataDictionary`; :func:`apply_dictionary` puts it on the value schema the load derived
from the SQL projection. Only a single-table query can be matched to a dictionary entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from producer_lib.schema import ForeignKey, ValueSchema


@dataclass(frozen=True)
class SourceTable:
    """The one table a SQL statement reads, as the statement spells it."""

    schema: str | None
    name: str
    schema_quoted: bool = False
    name_quoted: bool = False


def source_tables_of(sql: str, dialect: str) -> list[SourceTable]:
    """Every base table ``sql`` reads (not CTEs), sorted; empty on a parse error."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return []
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    tables = {
        (t.db or None, t.name, _quoted(t.args.get("db")), _quoted(t.this))
        for t in tree.find_all(exp.Table)
        if t.name and t.name not in ctes
    }
    return [SourceTable(*t) for t in sorted(tables, key=lambda t: (t[0] or "", t[1]))]


def source_table_of(sql: str, dialect: str) -> SourceTable | None:
    """Return the single table ``sql`` reads, or None (joins, several tables, parse errors)."""
    tables = source_tables_of(sql, dialect)
    return tables[0] if len(tables) == 1 else None


def _quoted(node: Any) -> bool:
    return isinstance(node, exp.Identifier) and bool(node.quoted)


@dataclass(frozen=True)
class DataDictionary:
    """Keys and comments of one source table, columns by their source names."""

    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    column_comments: Mapping[str, str] = field(default_factory=dict)
    table_comment: str | None = None


def apply_dictionary(schema: ValueSchema, dictionary: DataDictionary) -> None:
    """Put the keys and comments of ``dictionary`` on ``schema``.

    Columns match by name (exactly, else case-insensitively). A primary or foreign key is
    applied only when all its columns are in the projection; without its primary key the
    table stays append-only.
    """
    folded = {column.casefold(): column for column in schema.fields}

    def find(columns: tuple[str, ...]) -> tuple[str, ...] | None:
        found = tuple(c if c in schema.fields else folded.get(c.casefold(), "") for c in columns)
        return found if columns and all(found) else None

    if (key := find(dictionary.primary_key)) is not None:
        schema.set_primary_keys(*key)
    for fk in dictionary.foreign_keys:
        if (columns := find(fk.columns)) is not None:
            schema.add_foreign_key(columns, fk.ref_namespace, fk.ref_table, fk.ref_columns)
    for column, comment in dictionary.column_comments.items():
        if comment and (found := find((column,))) is not None:
            schema.set_column_comment(found[0], comment)
    if dictionary.table_comment:
        schema.set_table_comment(dictionary.table_comment)
