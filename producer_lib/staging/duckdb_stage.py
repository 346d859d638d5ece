"""The DuckDB staging database that readers write and the producer reads.

By default every reader and producer uses DuckDB's process-wide default connection
(:func:`duckdb.default_connection`, the one ``duckdb.sql(...)`` uses), so a flow can transform
a loaded table with ``duckdb.sql(...)`` and produce from it. A flow may pass its own connection.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable

import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema, value_schema_from_describe
from producer_lib.sql_text import quote_ident

logger = logging.getLogger(__name__)
_names = itertools.count()


_CONNECTION_LOCKS: dict[int, threading.RLock] = {}
_CONNECTION_LOCKS_GUARD = threading.Lock()


def connection_lock(connection: duckdb.DuckDBPyConnection) -> threading.RLock:
    """The lock of a DuckDB connection, taken by every reader and producer that uses it.

    Two runs in one process (a detached run and the one that takes over from it) each have
    a reader on DuckDB's default connection, and the producer exports from it. DuckDB's
    Python connection is not safe to use from two threads at once: one run on the event
    loop and the other in :meth:`SourceAdapter.run_locked`'s worker thread deadlocked, each
    holding what the other waited for (the GIL, the connection's context lock), or took the
    other's query result. A lock per reader did not stop that; one per connection does.
    Keyed by ``id``: a reused id only shares a lock.
    """
    with _CONNECTION_LOCKS_GUARD:
        return _CONNECTION_LOCKS.setdefault(id(connection), threading.RLock())


def default_connection() -> duckdb.DuckDBPyConnection:
    """Return DuckDB's process-wide default connection (the one ``duckdb.sql`` uses)."""
    return duckdb.default_connection()


def quote_table(table: str) -> str:
    """Quote a table name; a dotted name (``schema.table``) is quoted part by part."""
    return ".".join(quote_ident(part) for part in table.split("."))


def _temp_name(prefix: str) -> str:
    return f"__{prefix}_{next(_names)}"


def create_table(
    connection: duckdb.DuckDBPyConnection, table: str, arrow_schema: pa.Schema
) -> pa.Schema:
    """Create (or replace) ``table`` with the columns and types of ``arrow_schema``.

    Columns keep their original names (quoted). No NOT NULL constraints: null keys are
    reported by :func:`~producer_lib.staging.check_primary_key` with a readable message.

    Returns:
        The table's Arrow schema as DuckDB reports it.

    Raises:
        SourceError: DuckDB rejected the table (e.g. a type it cannot hold).
    """
    view = _temp_name("schema")
    connection.register(view, arrow_schema.empty_table())
    try:
        connection.execute(f"CREATE OR REPLACE TABLE {quote_table(table)} AS SELECT * FROM {view}")
    except duckdb.Error as exc:
        hint = (
            f"; DuckDB reads the dotted name as schema {table.rsplit('.', 1)[0]!r}, table "
            f"{table.rsplit('.', 1)[1]!r}: create that schema first, or name the table "
            "without a dot"
            if "." in table
            else ""
        )
        raise SourceError(f"Cannot create the staging table: {exc}{hint}", table=table) from exc
    finally:
        connection.unregister(view)
    logger.debug("staging table created table=%s columns=%d", table, len(arrow_schema))
    return table_arrow_schema(connection, table)


def table_arrow_schema(connection: duckdb.DuckDBPyConnection, table: str) -> pa.Schema:
    """Return the Arrow schema of a DuckDB table."""
    return connection.sql(f"SELECT * FROM {quote_table(table)} LIMIT 0").to_arrow_table().schema


def append_arrow(connection: duckdb.DuckDBPyConnection, table: str, page: pa.Table) -> int:
    """Append ``page`` to ``table``, matching columns by name; return the rows appended.

    Not thread-safe: callers serialise use of ``connection`` (see ``SourceAdapter.insert_page``).

    Raises:
        SourceError: A column is unknown or a value does not fit its column.
    """
    view = _temp_name("page")
    connection.register(view, page)
    try:
        connection.execute(f"INSERT INTO {quote_table(table)} BY NAME SELECT * FROM {view}")
    except duckdb.Error as exc:
        raise SourceError(f"Cannot append a page: {exc}", table=table, rows=page.num_rows) from exc
    finally:
        connection.unregister(view)
    return page.num_rows


def describe(
    connection: duckdb.DuckDBPyConnection, table_or_sql: str, name: str, namespace: str
) -> ValueSchema:
    """Describe a table or a query as a value schema (columns and types of its projection).

    A table's NOT NULL columns become non-nullable and its PRIMARY KEY the schema's key;
    a query's columns are all nullable.

    Args:
        connection: The DuckDB connection.
        table_or_sql: A table name, or a ``SELECT`` (anything DuckDB can DESCRIBE).
        name: Name of the schema (the table name).
        namespace: Namespace of the schema.

    Raises:
        SourceError: DuckDB cannot describe it (syntax error, unknown table ...).
    """
    target = table_or_sql if _is_query(table_or_sql) else quote_table(table_or_sql)
    try:
        rows = connection.execute(f"DESCRIBE {target}").fetchall()
    except duckdb.Error as exc:
        raise SourceError(
            f"DuckDB cannot describe the source: {exc}", table=name, sql=table_or_sql
        ) from exc
    return value_schema_from_describe(name, namespace, rows)


def _is_query(text: str) -> bool:
    head = text.lstrip().lstrip("(").lstrip().split(None, 1)
    return bool(head) and head[0].lower() in {
        "select",
        "with",
        "from",
        "values",
        "table",
        "pivot",
        "unpivot",
        "summarize",
    }


def row_count(connection: duckdb.DuckDBPyConnection, table: str) -> int:
    """Return the number of rows in ``table``."""
    result = connection.execute(f"SELECT count(*) FROM {quote_table(table)}").fetchone()
    return int(result[0]) if result else 0


def column_list(columns: Iterable[str]) -> str:
    """Return ``"a", "b"``: quoted, comma-separated column names."""
    return ", ".join(quote_ident(column) for column in columns)
