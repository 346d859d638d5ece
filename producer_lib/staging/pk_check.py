"""Primary-key check of a staging table or query, run before anything is produced.

One scan decides (rows, rows with a null key column, distinct keys); only a violation pays
for the counts and samples of the error message. ``docs/PERFORMANCE.md`` has the cost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import duckdb

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.staging.duckdb_stage import column_list, default_connection, quote_table

logger = logging.getLogger(__name__)
SAMPLE_SIZE = 5  # offending keys shown in the error: enough to find them, short enough to read
_QUERY_WORDS = frozenset({"select", "with", "from", "values", "table", "pivot", "unpivot"})


def check_primary_key(
    table: str,
    schema: ValueSchema | Sequence[str],
    connection: duckdb.DuckDBPyConnection | None = None,
) -> None:
    """Fail when the primary key of a staging table has duplicate or null values.

    A schema without primary key (an append-only table) passes.

    Args:
        table: The DuckDB table.
        schema: The table's value schema, or the key columns themselves.
        connection: DuckDB connection; default: DuckDB's default connection.

    Raises:
        SourceError: Keys are duplicate or null. The message gives the counts and up to
            :data:`SAMPLE_SIZE` offending keys, with ``table=`` and ``key_columns=``.
    """
    keys = tuple(schema.pks if isinstance(schema, ValueSchema) else schema)
    check_keys(table, keys, connection, table=table)


def check_keys(
    table_or_query: str,
    keys: Sequence[str],
    connection: duckdb.DuckDBPyConnection | None = None,
    **context: Any,
) -> None:
    """Fail when ``keys`` of a DuckDB table or query have duplicate or null values.

    Args:
        table_or_query: A table name, or a query (``SELECT``/``WITH``/``FROM``...).
        keys: The key columns (none: nothing to check).
        connection: DuckDB connection; default: DuckDB's default connection.
        **context: Where the rows go, for the message (``table=``, ``topic=``...).

    Raises:
        SourceError: Keys are duplicate or null, with ``key_columns=``, the counts and up
            to :data:`SAMPLE_SIZE` offending keys (``duplicate_sample``: key, rows).
    """
    if not keys:
        return
    conn = connection if connection is not None else default_connection()
    source = source_sql(table_or_query)
    if _keys_are_unique(conn, source, keys):
        logger.debug("primary key ok source=%s key_columns=%s", table_or_query, ",".join(keys))
        return
    nulls, null_sample = _null_keys(conn, source, keys)
    duplicates, duplicate_sample = _duplicate_keys(conn, source, keys)
    raise SourceError(
        f"Primary key violated: {duplicates} duplicate key(s), {nulls} row(s) with a null "
        f"key column; fix the source query (deduplicate or filter) or the declared key",
        **context,
        key_columns=tuple(keys),
        duplicate_keys=duplicates or None,
        duplicate_sample=duplicate_sample or None,
        null_keys=nulls or None,
        null_sample=null_sample or None,
    )


def source_sql(table_or_query: str) -> str:
    """What goes after ``FROM``: a quoted table name, or the query in parentheses."""
    text = table_or_query.strip()
    first = text.split(None, 1)[0].lower() if text else ""
    if first in _QUERY_WORDS or text.startswith("("):
        return f"({text})"
    return quote_table(text)


def _keys_are_unique(conn: duckdb.DuckDBPyConnection, source: str, keys: Sequence[str]) -> bool:
    """One scan: no key column null and as many distinct keys as rows.

    ``count(DISTINCT ...)`` is one hash aggregate with a single-row result; a
    ``GROUP BY ... HAVING count(*) > 1`` builds the same hash table and then returns groups.
    """
    distinct = column_list(keys) if len(keys) == 1 else f"({column_list(keys)})"
    nulls = " OR ".join(f"{column_list([k])} IS NULL" for k in keys)
    row = conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {nulls}), count(DISTINCT {distinct}) "
        f"FROM {source}"
    ).fetchone()
    assert row is not None
    rows, null_rows, distinct_keys = row
    return bool(null_rows == 0 and distinct_keys == rows)


def _null_keys(
    conn: duckdb.DuckDBPyConnection, source: str, keys: Sequence[str]
) -> tuple[int, list[tuple[Any, ...]]]:
    condition = " OR ".join(f"{column_list([k])} IS NULL" for k in keys)
    where = f"FROM {source} WHERE {condition}"
    count = conn.execute(f"SELECT count(*) {where}").fetchone()
    sample = conn.execute(f"SELECT {column_list(keys)} {where} LIMIT {SAMPLE_SIZE}").fetchall()
    return (int(count[0]) if count else 0), sample


def _duplicate_keys(
    conn: duckdb.DuckDBPyConnection, source: str, keys: Sequence[str]
) -> tuple[int, list[tuple[Any, ...]]]:
    cols = column_list(keys)
    not_null = " AND ".join(f"{column_list([k])} IS NOT NULL" for k in keys)
    groups = (
        f"SELECT {cols}, count(*) AS __rows FROM {source} WHERE {not_null} "
        f"GROUP BY ALL HAVING count(*) > 1"
    )
    count = conn.execute(f"SELECT count(*) FROM ({groups})").fetchone()
    sample = conn.execute(
        f"SELECT * FROM ({groups}) ORDER BY __rows DESC, {cols} LIMIT {SAMPLE_SIZE}"
    ).fetchall()
    return (int(count[0]) if count else 0), sample
