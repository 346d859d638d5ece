"""The SQL dialects the row-type rules are written in: Spark SQL, DuckDB and DataFusion.

The rules (:mod:`lakehouse_writer.rules.sql`, :mod:`lakehouse_writer.rules.merge`) are SQL
text built once; each engine runs it in its own SQL: Spark SQL (Spark's engine), DuckDB (the
driver's engine computes the last row per key of a small table) and DataFusion (delta-rs's
MERGE conditions and DELETE predicates). Only what differs between them lives here: how a name
is quoted, null-safe equality, a struct, a window function that skips nulls, a timestamp of
microseconds, and the names of types.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lakehouse_writer.runtime.session import quote_name

__all__ = ["DATAFUSION", "DUCKDB", "SPARK", "Dialect", "sql_literal"]


@dataclass(frozen=True)
class Dialect:
    """How one engine's SQL spells what the rules need.

    Attributes:
        name: The engine's name, for messages.
        quote: A column name as an identifier.
        null_safe_equal: Equality where NULL equals NULL, with ``{a}`` and ``{b}``.
        struct: A struct of (field name, SQL expression) pairs.
        first_non_null: The first non-null value of ``{x}`` in a window frame
            (``... OVER w`` follows).
        last_non_null: The last non-null value of ``{x}`` in a window frame.
        at_micros: A timestamp literal of ``{n}`` microseconds since the epoch (UTC).
        types: A Spark type (``simpleString``: ``decimal(10,2)``, ``bigint``) in this SQL.
        hash: A 64-bit hash of the comma-separated expressions ``{x}``: grouping by it
            shuffles one number, whatever the key's columns (a collision only errs safe).
        micros_of: The microseconds since the epoch of timestamp ``{x}``.
        collect_set: The distinct values of ``{x}`` in a group, as a list.
    """

    name: str
    quote: Callable[[str], str]
    null_safe_equal: str
    struct: Callable[[Sequence[tuple[str, str]]], str]
    first_non_null: str
    last_non_null: str
    at_micros: str
    types: Callable[[str], str]
    hash: str = "hash({x})"
    micros_of: str = "epoch_us({x})"
    collect_set: str = "list(DISTINCT {x})"


def sql_literal(text: str) -> str:
    """A SQL string literal (the same in Spark, DuckDB and DataFusion)."""
    return "'" + text.replace("'", "''") + "'"


def _double_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _named_struct(fields: Sequence[tuple[str, str]]) -> str:
    pairs = ", ".join(f"'{name.replace(chr(39), chr(39) * 2)}', {expr}" for name, expr in fields)
    return f"named_struct({pairs})"


def _duckdb_struct(fields: Sequence[tuple[str, str]]) -> str:
    return "struct_pack(" + ", ".join(f"{_double_quote(n)} := {e}" for n, e in fields) + ")"


_SIMPLE = {
    "boolean": "BOOLEAN",
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "int": "INTEGER",
    "bigint": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "binary": "BLOB",
    "date": "DATE",
    "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def _types_of(engine: str, simple: dict[str, str]) -> Callable[[str], str]:
    """Spark type -> ``engine``'s SQL type (the types a change row's scope columns can have)."""

    def convert(spark: str) -> str:
        if spark in simple:
            return simple[spark]
        found = _DECIMAL.fullmatch(spark)
        if found is None:
            raise ValueError(f"no {engine} type for Spark's {spark}")
        return f"DECIMAL({found.group(1)},{found.group(2)})"

    return convert


_duckdb_type = _types_of("DuckDB", _SIMPLE)
_datafusion_type = _types_of(  # delta-rs predicates
    "DataFusion", {**_SIMPLE, "timestamp": "TIMESTAMP", "binary": "BYTEA"}
)


SPARK = Dialect(
    name="spark",
    quote=quote_name,
    null_safe_equal="({a} <=> {b})",
    struct=_named_struct,
    first_non_null="first_value({x}) IGNORE NULLS",
    last_non_null="last_value({x}) IGNORE NULLS",
    at_micros="timestamp_micros({n})",
    types=str,
    hash="xxhash64({x})",
    micros_of="unix_micros({x})",
    collect_set="collect_set({x})",
)
DUCKDB = Dialect(
    name="duckdb",
    quote=_double_quote,
    null_safe_equal="({a} IS NOT DISTINCT FROM {b})",
    struct=_duckdb_struct,
    first_non_null="first_value({x} IGNORE NULLS)",
    last_non_null="last_value({x} IGNORE NULLS)",
    at_micros="make_timestamp({n})::TIMESTAMPTZ",  # the connection's zone is UTC
    types=_duckdb_type,
)
DATAFUSION = Dialect(
    name="datafusion",
    quote=_double_quote,
    null_safe_equal="({a} IS NOT DISTINCT FROM {b})",
    struct=_named_struct,
    first_non_null="first_value({x}) IGNORE NULLS",
    last_non_null="last_value({x}) IGNORE NULLS",
    at_micros="arrow_cast({n}, 'Timestamp(Microsecond, Some(\"UTC\"))')",
    types=_datafusion_type,
)
