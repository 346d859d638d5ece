"""DuckDBReader: load anything DuckDB can query into a staging table.

Files (``read_csv``/``read_parquet``/``read_json`` or a quoted path), attached databases and
Delta tables (``delta_scan('path')``). The SQL runs in the staging database itself. The delta
extension loads offline from the ``duckdb-extension-delta`` package; without it,
``delta_scan('path')`` is read with delta-rs (``deltalake``) into an Arrow dataset instead.
Paths on Azure (``az://``, ``abfss://``: OneLake, ADLS, Blob) load the ``azure`` extension and
take their credentials from ``AZURE_STORAGE_*`` (:mod:`producer_lib.staging.azure_storage`).

Example::

    async with DuckDBReader(logger) as reader:
        await reader.load("ORDERS", "select * from delta_scan('/lake/sales/orders')", "SALES")
"""

from __future__ import annotations

import itertools
import logging
import re

import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.sources.adapter import SourceAdapter
from producer_lib.sources.dictionary import (
    DataDictionary,
    apply_dictionary,
    source_table_of,
    source_tables_of,
)
from producer_lib.sql_text import quote_literal
from producer_lib.staging import (
    delta_scan_location,
    describe,
    load_packaged_extension,
    quote_table,
    row_count,
)
from producer_lib.staging.azure_storage import AZURE_PATH, AzureStorageSettings, use_azure_storage

_DELTA_SCAN = re.compile(r"delta_scan\s*\(\s*'((?:[^']|'')*)'\s*\)", re.IGNORECASE)
_views = itertools.count()


class DuckDBReader(SourceAdapter):
    """Loads the result of any DuckDB SQL into a DuckDB table.

    Args:
        logger: Where progress goes.
        connection: The staging database; default: DuckDB's default connection.
        use_delta_extension: Read ``delta_scan`` with DuckDB's delta extension (from its PyPI
            package); False, or the package missing, reads Delta tables with delta-rs.
        azure: Credentials for Azure paths; default: ``AZURE_STORAGE_*``, read at the first
            SQL that names one.
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        use_delta_extension: bool = True,
        azure: AzureStorageSettings | None = None,
    ) -> None:
        super().__init__(logger, connection=connection)
        self.use_delta_extension = use_delta_extension
        self._delta_views: list[str] = []
        self._azure = azure
        self._azure_ready = False

    async def close(self) -> None:
        """Drop the Delta views of the delta-rs fallback."""
        for view in self._delta_views:
            self.connection.unregister(view)
        self._delta_views.clear()
        await super().close()

    def _prepare_sql(self, sql: str) -> str:
        if AZURE_PATH.search(sql) and not self._azure_ready:
            provider = use_azure_storage(self.connection, self._azure)
            self._azure_ready = True
            self.logger.info("azure storage ready credential=%s", provider)
        if not _DELTA_SCAN.search(sql):
            return sql
        if self.use_delta_extension:
            try:
                load_packaged_extension(self.connection, "delta")
                return _DELTA_SCAN.sub(_scan_by_location, sql)
            except SourceError as exc:
                self.logger.warning("delta extension unavailable, using delta-rs error=%s", exc)
        return _DELTA_SCAN.sub(lambda m: self._delta_view(m.group(1).replace("''", "'")), sql)

    def _delta_view(self, path: str) -> str:
        try:  # only the fallback needs delta-rs, an extra of its own
            from deltalake import DeltaTable
            from deltalake.exceptions import TableNotFoundError
        except ModuleNotFoundError as exc:
            raise SourceError(
                "reading a Delta table needs DuckDB's delta extension: pip "
                "install 'flow-platform[lakehouse]'",
                path=path,
            ) from exc

        try:
            table = DeltaTable(path)
            mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
            if mapping != "none":  # delta-rs #930: every column of such a table reads as null
                raise SourceError(
                    "delta-rs reads a column-mapped Delta table as nulls; install DuckDB's "
                    "delta extension: pip install 'flow-platform[lakehouse]'",
                    path=path,
                )
            dataset = table.to_pyarrow_dataset()
        except (TableNotFoundError, OSError) as exc:
            raise SourceError(f"Cannot read the Delta table: {exc}", path=path) from exc
        view = f"__delta_{next(_views)}"
        self.connection.register(view, dataset)
        self._delta_views.append(view)
        return view

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        return describe(self.connection, self._prepare_sql(sql), name, namespace)

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        query = f"INSERT INTO {quote_table(duckdb_table)} SELECT * FROM ({self._prepare_sql(sql)})"
        try:
            await self.run_locked(self.connection.execute, query)
        except duckdb.Error as exc:
            raise SourceError(f"DuckDB load failed: {exc}", table=duckdb_table, sql=sql) from exc
        self._progress[duckdb_table].add(row_count(self.connection, duckdb_table))

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        source = source_table_of(sql, "duckdb")
        if source is None or _DELTA_SCAN.search(sql):
            return
        apply_dictionary(schema, _duckdb_dictionary(self.connection, source.schema, source.name))

    async def _lineage_schema(self, sql: str) -> dict[str, dict[str, str]]:
        """Columns of the DuckDB tables and views ``sql`` reads (``DESCRIBE``)."""
        schema: dict[str, dict[str, str]] = {}
        for source in source_tables_of(sql, "duckdb"):
            name = f"{source.schema}.{source.name}" if source.schema else source.name
            rows = await self.run_locked(
                lambda n=name: self.connection.execute(f"DESCRIBE {quote_table(n)}").fetchall()
            )
            schema[name] = {row[0]: str(row[1]) for row in rows}
        return schema


def _scan_by_location(match: re.Match[str]) -> str:
    """``delta_scan('<path>')`` with a local path as the URL every name reads by."""
    location = delta_scan_location(match.group(1).replace("''", "'"))
    return f"delta_scan({quote_literal(location)})"


def _duckdb_dictionary(
    conn: duckdb.DuckDBPyConnection, schema_name: str | None, table: str
) -> DataDictionary:
    where = "table_name = ? AND schema_name = coalesce(?, current_schema())"
    params = [table, schema_name]
    pk = conn.execute(
        f"SELECT constraint_column_names FROM duckdb_constraints() WHERE {where} "
        "AND constraint_type = 'PRIMARY KEY'",
        params,
    ).fetchone()
    comments = conn.execute(
        f"SELECT column_name, comment FROM duckdb_columns() WHERE {where} AND comment IS NOT NULL",
        params,
    ).fetchall()
    table_comment = conn.execute(
        f"SELECT comment FROM duckdb_tables() WHERE {where}", params
    ).fetchone()
    return DataDictionary(
        primary_key=tuple(pk[0]) if pk else (),
        column_comments=dict(comments),
        table_comment=table_comment[0] if table_comment else None,
    )
