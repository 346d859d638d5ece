"""PostgresReader: load the result of a PostgreSQL query into a DuckDB staging table.

psycopg 3 (async) describes the query (columns, exact types and typmods, from ``LIMIT 0``),
reads the data dictionary and the lineage columns from the catalog, and serves the flow's own
queries (``reader.pg``). The rows travel through DuckDB's postgres_scanner, the query pushed
down with ``postgres_query`` (a whole table: the scanner's parallel table scan; see
:mod:`producer_lib.sources.postgres_scan`): binary ``COPY`` decoded in C++, 3-6x what fetching
Python tuples with psycopg gives. The copy uses one more connection (a whole table: one per
DuckDB thread) with the same DSN. Without the
``duckdb-extension-postgres_scanner`` package (or with ``use_scanner=False``) the rows are
fetched with a psycopg server-side cursor in pages of ``page_size`` rows, as before. Primary
keys, foreign keys and comments come from ``pg_constraint``, ``col_description`` and
``obj_description`` when the query reads a single table.

The copy runs on its own connection, in a snapshot taken after the flow's earlier queries on
``reader.pg``: a horizon read there first (``flows/postgres_flow.py``) stays safe.

Type mapping (anything else is a SourceError naming the column; cast it in SQL):

* ``numeric(p,s)`` -> DECIMAL(p,s) (p at most 38); ``numeric`` without precision ->
  DECIMAL(38,10): a value with more than 10 decimals fails the load (cast it in SQL);
* ``varchar(n)``/``char(n)`` -> NVARCHAR(n) (``char`` keeps its padding); ``text``, ``json``,
  ``jsonb``, ``xml``, ``inet``, ``cidr``, ``macaddr`` -> STRING (PostgreSQL's text);
* ``timestamp`` (read as UTC) and ``timestamptz`` -> timestamp-micros; ``time`` -> time-micros;
* a one-dimensional array of any of these -> an Avro array with nullable elements.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
from psycopg import sql as pgsql
from psycopg.types.string import TextLoader

from producer_lib.errors import EncodeError, SchemaError, SourceError
from producer_lib.schema import (
    AvroArray,
    AvroBoolean,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    AvroShort,
    AvroString,
    AvroTimeMicros,
    AvroTimestampMicros,
    AvroType,
    AvroUUID,
    ValueSchema,
)
from producer_lib.schema.rows import rows_to_arrow
from producer_lib.sources.adapter import SourceAdapter, settle
from producer_lib.sources.dictionary import (
    SourceTable,
    apply_dictionary,
    source_table_of,
    source_tables_of,
)
from producer_lib.sources.postgres_catalog import read_dictionary
from producer_lib.sources.postgres_scan import (
    CANCEL_SQL,
    EXTENSION,
    PgColumn,
    PostgresScan,
    table_scan_fits,
    whole_table_of,
)
from producer_lib.staging import packaged_extension_path, row_count

_TEXT_TYPES = ("json", "jsonb", "uuid", "xml", "inet", "cidr", "macaddr")  # loaded as text
_UNBOUNDED_NUMERIC = AvroDecimal(38, 10)


def _numeric(column: psycopg.Column) -> AvroType:
    if column.precision is None:
        return _UNBOUNDED_NUMERIC
    return AvroDecimal(column.precision, column.scale or 0)


def _sized_text(column: psycopg.Column) -> AvroType:
    return AvroNVarchar(column.display_size) if column.display_size else AvroString()


def _fixed(avro_type: AvroType) -> Callable[[psycopg.Column], AvroType]:
    return lambda column: avro_type


_TO_AVRO: dict[str, Callable[[psycopg.Column], AvroType]] = {
    "bool": _fixed(AvroBoolean()),
    "int2": _fixed(AvroShort()),
    "int4": _fixed(AvroInt()),
    "int8": _fixed(AvroLong()),
    "float4": _fixed(AvroFloat()),
    "float8": _fixed(AvroDouble()),
    "oid": _fixed(AvroLong()),
    "numeric": _numeric,
    "varchar": _sized_text,
    "bpchar": _sized_text,
    "text": _fixed(AvroString()),
    "name": _fixed(AvroString()),
    "json": _fixed(AvroString()),
    "jsonb": _fixed(AvroString()),
    "xml": _fixed(AvroString()),
    "inet": _fixed(AvroString()),
    "cidr": _fixed(AvroString()),
    "macaddr": _fixed(AvroString()),
    "uuid": _fixed(AvroUUID()),
    "bytea": _fixed(AvroBytes()),
    "date": _fixed(AvroDate()),
    "time": _fixed(AvroTimeMicros()),
    "timestamp": _fixed(AvroTimestampMicros()),
    "timestamptz": _fixed(AvroTimestampMicros()),
}


def avro_type_for_postgres(type_name: str, column: psycopg.Column) -> AvroType:
    """Map a PostgreSQL type (``pg_type.typname``) of a result column to an Avro type.

    Raises:
        SourceError: The type has no mapping, or a numeric is too wide; names the column.
    """
    rule = _TO_AVRO.get(type_name)
    if rule is None:
        raise SourceError(
            "Unsupported PostgreSQL type: cast the column in SQL (e.g. ::text)",
            column=column.name,
            postgres_type=type_name,
        )
    try:
        return rule(column)
    except SchemaError as exc:  # numeric(p,s) with p > 38
        raise SourceError(
            f"PostgreSQL type does not fit: {exc}; cast the column in SQL",
            column=column.name,
            postgres_type=type_name,
        ) from exc


def pg_column(type_name: str, is_array: bool, column: psycopg.Column) -> PgColumn:
    """Map a result column (of ``type_name``, or an array of it) for the load.

    Raises:
        SourceError: The type has no mapping; the message names the column.
    """
    try:
        element = avro_type_for_postgres(type_name, column)
    except SourceError as exc:
        if not is_array:
            raise
        raise SourceError(
            "Unsupported PostgreSQL array: cast the column in SQL (e.g. ::text)",
            column=column.name,
            postgres_type=f"{type_name}[]",
        ) from exc
    return PgColumn(
        name=column.name,
        type_name=type_name,
        is_array=is_array,
        avro_type=AvroArray(element, items_nullable=True) if is_array else element,
        length=column.display_size if type_name == "bpchar" else None,
        unbounded_numeric=type_name == "numeric" and column.precision is None,
    )


class PostgresReader(SourceAdapter):
    """Loads PostgreSQL query results into DuckDB.

    Args:
        dsn: libpq connection string or URL, e.g. ``host=db port=5432 dbname=lims user=flow``.
        logger: Where progress goes.
        connection: The DuckDB staging database; default: DuckDB's default connection.
        page_size: Rows per fetch and per DuckDB append when reading with psycopg.
        use_scanner: Copy with DuckDB's postgres_scanner (from its PyPI package); False, or
            the package missing, fetches the rows with psycopg instead (about 6x slower).
    """

    sql_dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        logger: logging.Logger | None = None,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        page_size: int = 10_000,
        use_scanner: bool = True,
    ) -> None:
        super().__init__(logger, connection=connection)
        self.dsn = dsn
        self.page_size = page_size
        self.use_scanner = use_scanner and packaged_extension_path(EXTENSION) is not None
        if use_scanner and not self.use_scanner:
            self.logger.warning(
                "PostgreSQL rows read with psycopg, about 6x slower: pip "
                "install duckdb-extension-%s==%s",
                EXTENSION,
                duckdb.__version__,
            )
        self._pg: psycopg.AsyncConnection[Any] | None = None
        self._scan = PostgresScan(self.connection, dsn)
        # By SQL (loads may run concurrently): the columns, and the whole table it reads if any.
        self._plans: dict[str, tuple[list[PgColumn], tuple[str, str] | None]] = {}

    async def open(self) -> None:
        """Connect to PostgreSQL."""
        try:
            self._pg = await psycopg.AsyncConnection.connect(self.dsn)
        except psycopg.Error as exc:
            raise SourceError(f"Cannot connect to PostgreSQL: {exc}") from exc
        for type_name in _TEXT_TYPES:
            self._pg.adapters.register_loader(type_name, TextLoader)

    async def close(self) -> None:
        """Close the PostgreSQL connection and detach the database from DuckDB."""
        with self._lock:
            self._scan.detach()
        self._plans.clear()
        if self._pg is not None:
            await self._pg.close()
            self._pg = None
        await super().close()

    @property
    def pg(self) -> psycopg.AsyncConnection[Any]:
        """The open PostgreSQL connection (``async with`` opens it)."""
        if self._pg is None:
            raise SourceError("PostgresReader is not open: use 'async with PostgresReader(...)'")
        return self._pg

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        async with self.pg.cursor() as cur:
            try:
                await cur.execute(f"SELECT * FROM ({sql}) AS q LIMIT 0")  # type: ignore[arg-type]
            except psycopg.Error as exc:
                await self.pg.rollback()
                raise SourceError(
                    f"PostgreSQL rejected the query: {exc}", table=name, sql=sql
                ) from exc
            columns = cur.description or []
        try:
            mapped = [pg_column(*await self._type_of(c.type_code), c) for c in columns]
            self._plans[sql] = (mapped, await self._whole_table(sql, mapped))
        finally:
            await self.pg.rollback()
        schema = ValueSchema(name, namespace)
        for column in mapped:
            schema.add_field(column.name, column.avro_type)
        return schema

    async def _type_of(self, oid: int) -> tuple[str, bool]:
        """``(typname, is_array)``: an array's element type, else the type itself."""
        info = self.pg.adapters.types.get(oid)
        if info is not None:  # psycopg finds an array type under its element's entry
            return info.name, oid == info.array_oid != info.oid
        async with self.pg.cursor() as cur:
            await cur.execute(
                "SELECT coalesce(e.typname, t.typname), e.oid IS NOT NULL FROM "
                "pg_type t LEFT JOIN pg_type e ON t.typcategory = 'A' AND "
                "e.oid = t.typelem WHERE t.oid = %s",
                [oid],
            )
            row = await cur.fetchone()
        return (str(row[0]), bool(row[1])) if row else (f"oid {oid}", False)

    async def _whole_table(self, sql: str, columns: list[PgColumn]) -> tuple[str, str] | None:
        """(schema, table) when ``sql`` reads a whole ordinary table the scanner stages exactly."""
        source = whole_table_of(sql)
        if not self.use_scanner or source is None or not table_scan_fits(columns):
            return None
        cursor = await self.pg.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
            "n.oid = c.relnamespace WHERE c.oid = to_regclass(%s) AND c.relkind = 'r'",
            [_regclass_text(source)],
        )
        found = await cursor.fetchone()
        return (str(found[0]), str(found[1])) if found else None

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        if not self.use_scanner:
            await self._copy_pages(duckdb_table, sql)
            return
        tag = f"flow-load {uuid.uuid4().hex}"
        try:
            await self.run_locked(self._scan.copy, duckdb_table, sql, *self._plans[sql], tag)
        except asyncio.CancelledError:  # a flow out of time: stop the copy, free the connection
            self.connection.interrupt()  # a table scan stops at its next range
            await self._cancel_copy(tag)  # a query stops on the server
            raise
        self._progress[duckdb_table].add(row_count(self.connection, duckdb_table))

    async def _cancel_copy(self, tag: str) -> None:
        """Cancel the scanner's query tagged ``tag`` on the server (best effort)."""
        try:
            await self.pg.execute(CANCEL_SQL, [f"/* {tag} */"])
        except psycopg.Error as exc:
            self.logger.warning("copy not cancelled on the server error=%s", exc)
        finally:
            await self.pg.rollback()

    async def _copy_pages(self, duckdb_table: str, sql: str) -> None:
        """Fetch the rows with a psycopg server-side cursor, page by page (no scanner)."""
        page_schema = self.table_schema.get_pyarrow(technical=False)
        try:
            async with self.pg.cursor(name="flow_load") as cur:
                await cur.execute(sql)  # type: ignore[arg-type]
                while rows := await cur.fetchmany(self.page_size):
                    await settle(
                        self.insert_page(duckdb_table, _page(rows, page_schema, duckdb_table))
                    )
        except psycopg.Error as exc:
            raise SourceError(
                f"Reading from PostgreSQL failed: {exc}", table=duckdb_table, sql=sql
            ) from exc
        finally:
            await self.pg.rollback()

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        source = source_table_of(sql, "postgres")
        if source is None:
            self.logger.info(
                "no data dictionary lookup: not a single-table query table=%s", schema.name
            )
            return
        try:
            dictionary = await read_dictionary(self.pg, _regclass_text(source))
        finally:
            await self.pg.rollback()
        apply_dictionary(schema, dictionary)

    async def _lineage_schema(self, sql: str) -> dict[str, dict[str, str]]:
        """Columns of the tables ``sql`` reads, from ``pg_attribute`` (for ``select *``)."""
        schema: dict[str, dict[str, str]] = {}
        try:
            for source in source_tables_of(sql, "postgres"):
                cursor = await self.pg.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                    "ORDER BY attnum",
                    (_regclass_text(source),),
                )
                name = f"{source.schema}.{source.name}" if source.schema else source.name
                schema[name] = {row[0]: row[1] for row in await cursor.fetchall()}
        finally:
            await self.pg.rollback()
        return schema


def _regclass_text(source: SourceTable) -> str:
    def part(name: str, quoted: bool) -> str:
        return pgsql.Identifier(name).as_string(None) if quoted else name

    name = part(source.name, source.name_quoted)
    return f"{part(source.schema, source.schema_quoted)}.{name}" if source.schema else name


def _page(rows: list[tuple[Any, ...]], schema: pa.Schema, duckdb_table: str) -> pa.Table:
    """A page of the cursor's rows in Arrow; a value that does not fit is the source's error."""
    try:
        return rows_to_arrow(rows, schema, table=duckdb_table)
    except EncodeError as exc:
        raise SourceError(f"Value does not fit its column: {exc.message}", **exc.context) from exc
