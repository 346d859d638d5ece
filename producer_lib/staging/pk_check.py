"""Primary-key check of a staging table, run before anything is produced."""

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
    if not keys:
        return
    conn = connection if connection is not None else default_connection()
    nulls, null_sample = _null_keys(conn, table, keys)
    duplicates, duplicate_sample = _duplicate_keys(conn, table, keys)
    if nulls or duplicates:
        raise SourceError(
            f"Primary key violated: {duplicates} duplicate key(s), {nulls} row(s) with a null "
            f"key column; fix the source query (deduplicate or filter) or the declared key",
            table=table, key_columns=keys, duplicate_keys=duplicates or None,
            duplicate_sample=duplicate_sample or None, null_keys=nulls or None,
            null_sample=null_sample or None,
        )  # fmt: skip
    logger.debug("primary key ok table=%s key_columns=%s", table, ",".join(keys))


def _null_keys(
    conn: duckdb.DuckDBPyConnection, table: str, keys: Sequence[str]
) -> tuple[int, list[tuple[Any, ...]]]:
    condition = " OR ".join(f"{column_list([k])} IS NULL" for k in keys)
    source = f"FROM {quote_table(table)} WHERE {condition}"
    count = conn.execute(f"SELECT count(*) {source}").fetchone()
    sample = conn.execute(f"SELECT {column_list(keys)} {source} LIMIT {SAMPLE_SIZE}").fetchall()
    return (int(count[0]) if count else 0), sample


def _duplicate_keys(
    conn: duckdb.DuckDBPyConnection, table: str, keys: Sequence[str]
) -> tuple[int, list[tuple[Any, ...]]]:
    cols = column_list(keys)
    not_null = " AND ".join(f"{column_list([k])} IS NOT NULL" for k in keys)
    groups = (
        f"SELECT {cols}, count(*) AS __rows FROM {quote_table(table)} WHERE {not_null} "
        f"GROUP BY ALL HAVING count(*) > 1"
    )
    count = conn.execute(f"SELECT count(*) FROM ({groups})").fetchone()
    sample = conn.execute(
        f"SELECT * FROM ({groups}) ORDER BY __rows DESC, {cols} LIMIT {SAMPLE_SIZE}"
    ).fetchall()
    return (int(count[0]) if count else 0), sample
