"""SourceAdapter: the base of every reader, loading a source into a DuckDB staging table.

A reader implements two steps; the base class does the rest of :meth:`SourceAdapter.load`::

    describe  (_describe)   columns and types of the SQL projection -> ValueSchema
    augment   (_augment)    primary/foreign keys and comments from the data dictionary
    prepare   prepare_load  create the DuckDB table from the schema's Arrow types
    copy      (_copy)       pages of rows -> insert_page (safe from concurrent tasks)
    check     check_primary_key  duplicate or null keys fail the load, before producing
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.sources.progress import Progress
from producer_lib.staging import append_arrow, check_primary_key, create_table, default_connection

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadRecord:
    """What one :meth:`SourceAdapter.load` read: the input of its lineage document.

    Attributes:
        target: ``<namespace>.<name>`` of the schema the load produced.
        sql: The SQL given to ``load``.
        dialect: sqlglot dialect of that SQL, or None when it is not SQL (REST resources).
        columns: Output columns, by original name.
        source_schema: Columns and types of the tables the SQL reads (table -> column ->
            type), for ``select *``; best effort, empty when unknown.
    """

    target: str
    sql: str
    dialect: str | None
    columns: tuple[str, ...]
    source_schema: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def rows_to_arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    """Turn a page of row tuples into an Arrow table of ``schema`` (column by column).

    Raises:
        SourceError: A value does not fit its column's type (names the column).
    """
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = []
    for item, values in zip(schema, columns, strict=True):
        try:
            arrays.append(pa.array(values, type=item.type, from_pandas=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise SourceError(f"Value does not fit its column: {exc}", column=item.name,
                              arrow_type=str(item.type)) from exc  # fmt: skip
    return pa.Table.from_arrays(arrays, schema=schema)


class SourceAdapter:
    """Base of every reader: loads a source into a DuckDB table and describes it.

    Args:
        logger: Where progress and best-effort failures are logged; default: this module's.
        connection: The DuckDB database to stage in; default: DuckDB's process-wide default
            connection, the one ``duckdb.sql(...)`` and the producer use. Staging tables
            are created in its current database and schema. The adapter uses it from worker
            threads, one call at a time (an asyncio lock): do not use it from another thread
            while a load runs.

    Use as ``async with Reader(logger) as reader: await reader.load(...)``.

    Attributes:
        sql_dialect: sqlglot dialect of the SQL the reader takes (lineage is derived from
            it); None when ``load`` does not take SQL.
        loads: What each load read, by target ``<namespace>.<name>`` (the last load wins).
    """

    sql_dialect: str | None = "duckdb"

    def __init__(
        self, logger: logging.Logger | None = None, *,
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:  # fmt: skip
        self.logger = logger or _log
        self.connection = connection if connection is not None else default_connection()
        self._lock = asyncio.Lock()
        self._table_schema: ValueSchema | None = None
        self._schema_name: tuple[str, str] | None = None
        self._progress: dict[str, Progress] = {}
        self.source_system: str | None = None
        self.last_sql: str | None = None
        self.loads: dict[str, LoadRecord] = {}
        self._open = False

    @property
    def is_open(self) -> bool:
        """True inside ``async with`` (between :meth:`open` and :meth:`close`)."""
        return self._open

    async def __aenter__(self) -> Self:
        await self.open()
        self._open = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self._open = False
        await self.close()

    async def open(self) -> None:
        """Open the source (connections, sessions). Readers extend this."""

    async def close(self) -> None:
        """Release what :meth:`open` acquired. Readers extend this."""

    # -- schema ---------------------------------------------------------------------------

    @property
    def table_schema(self) -> ValueSchema:
        """The value schema the last :meth:`load` produced.

        Raises:
            SourceError: Nothing was loaded yet.
        """
        if self._table_schema is None:
            raise SourceError("No table_schema yet: call load() first")
        return self._table_schema

    def set_schema_name_for_sql(self, name: str, namespace: str) -> None:
        """Name the schema the next :meth:`load` derives (default: its table and namespace)."""
        self._schema_name = (name, namespace)

    async def augment_schema(self) -> None:
        """Add keys and comments from the source's data dictionary, best effort.

        A failure is logged as a warning, never raised: the load goes on without them.
        """
        schema, sql = self.table_schema, self.last_sql or ""
        try:
            await self._augment(schema, sql)
        except Exception as exc:  # best effort by contract: log, never fail the load
            self.logger.warning("schema not augmented table=%s error=%s", schema.name, exc)

    # -- staging --------------------------------------------------------------------------

    async def prepare_load(self, duckdb_table: str, table_schema: ValueSchema) -> pa.Schema:
        """Create (or replace) the DuckDB table for ``table_schema``; return its Arrow schema."""
        arrow_schema = table_schema.get_pyarrow(technical=False)
        async with self._lock:
            conn = self.connection
            result = await asyncio.to_thread(create_table, conn, duckdb_table, arrow_schema)
        self._progress[duckdb_table] = Progress(self.logger, duckdb_table)
        return result

    async def insert_page(self, duckdb_table: str, arrow_table: pa.Table) -> int:
        """Append a page to ``duckdb_table`` (columns by name); return the rows appended.

        Safe to call from many concurrent tasks: appends are serialised by an asyncio lock
        and run in a worker thread, so the event loop keeps fetching meanwhile.
        """
        async with self._lock:
            rows = await asyncio.to_thread(append_arrow, self.connection, duckdb_table, arrow_table)
        progress = self._progress.setdefault(duckdb_table, Progress(self.logger, duckdb_table))
        progress.add(rows)
        return rows

    def check_primary_key(self, duckdb_table: str, schema: ValueSchema | None = None) -> None:
        """Fail on duplicate or null primary keys in ``duckdb_table`` (see staging)."""
        check_primary_key(duckdb_table, schema or self.table_schema, self.connection)

    # -- the load -------------------------------------------------------------------------

    async def load(
        self, duckdb_table: str, sql: str, namespace: str | None = None,
        source_system: str | None = None,
    ) -> ValueSchema:  # fmt: skip
        """Load the result of ``sql`` on the source into the DuckDB table ``duckdb_table``.

        Args:
            duckdb_table: The staging table to (re)create, e.g. ``"SAMPLE_PLAN"``; also the
                schema's name unless :meth:`set_schema_name_for_sql` named it.
            sql: What to read, in the source's language (a SQL query; RestReader: a resource).
            namespace: Namespace of the schema, e.g. ``"LABWARE"``; default: source_system,
                else ``"default"``.
            source_system: Name of the source system, e.g. ``"LABWARE"``; kept as
                ``self.source_system`` and as the schema property ``sourceSystem``.

        Returns:
            The value schema, also :attr:`table_schema`.

        Raises:
            SourceError: Reading failed, or the primary key has duplicate or null values.
        """
        name, space = self._schema_name or (duckdb_table, namespace or source_system or "default")
        self._schema_name, self.last_sql, self.source_system = None, sql, source_system
        self._table_schema = schema = await self._describe(sql, name, space)
        if source_system:
            schema.properties["sourceSystem"] = source_system
        await self.augment_schema()
        arrow_schema = await self.prepare_load(duckdb_table, schema)
        await self._copy(duckdb_table, sql, arrow_schema)
        self._progress[duckdb_table].done()
        self.check_primary_key(duckdb_table, schema)
        await self._record_load(schema, sql)
        return schema

    async def _record_load(self, schema: ValueSchema, sql: str) -> None:
        target = f"{schema.namespace}.{schema.name}"
        source_schema: Mapping[str, Mapping[str, str]] = {}
        if self.sql_dialect:  # `*` and unqualified columns of joins need the sources' columns
            try:
                source_schema = await self._lineage_schema(sql)
            except Exception as exc:  # lineage is best effort: never fail the load for it
                self.logger.warning("source columns unknown table=%s error=%s", target, exc)
        self.loads[target] = LoadRecord(target, sql, self.sql_dialect, tuple(schema.fields),
                                        source_schema)  # fmt: skip

    async def _lineage_schema(self, sql: str) -> Mapping[str, Mapping[str, str]]:
        """Columns and types of the tables ``sql`` reads. Readers that can, implement it."""
        return {}

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        """Return the columns and types of ``sql``'s projection. Readers implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _describe")

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        """Add keys and comments from the data dictionary. Default: nothing to add."""

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        """Copy the rows of ``sql`` into ``duckdb_table``. Readers implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _copy")
