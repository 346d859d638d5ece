"""PostgresReader: load the result of a PostgreSQL query into a DuckDB staging table.

psycopg 3 (async). Columns and types come from the query's result description; rows are
fetched with a server-side cursor in pages of ``page_size`` rows, converted to Arrow and
appended to DuckDB. Primary keys, foreign keys and comments come from ``pg_constraint``,
``col_description`` and ``obj_description`` when the query reads a single table.

Type mapping (anything else is a SourceError naming the column; cast it in SQL):

* ``numeric(p,s)`` -> DECIMAL(p,s); ``numeric`` without precision -> DECIMAL(38,10): a value
  with more than 10 decimals fails the load (cast it in SQL);
* ``varchar(n)``/``char(n)`` -> NVARCHAR(n); ``text``, ``json``, ``jsonb``, ``xml`` -> STRING;
* ``timestamp`` (read as UTC) and ``timestamptz`` -> timestamp-micros; ``time`` -> time-micros.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
from psycopg import sql as pgsql
from psycopg.types.string import TextLoader

from producer_lib.errors import SourceError
from producer_lib.schema import (
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
)  # fmt: skip
from producer_lib.sources.adapter import SourceAdapter, rows_to_arrow
from producer_lib.sources.dictionary import (
    SourceTable,
    apply_dictionary,
    source_table_of,
    source_tables_of,
)
from producer_lib.sources.postgres_catalog import read_dictionary

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
    "bool": _fixed(AvroBoolean()), "int2": _fixed(AvroShort()), "int4": _fixed(AvroInt()),
    "int8": _fixed(AvroLong()), "float4": _fixed(AvroFloat()), "float8": _fixed(AvroDouble()),
    "oid": _fixed(AvroLong()), "numeric": _numeric, "varchar": _sized_text,
    "bpchar": _sized_text, "text": _fixed(AvroString()), "name": _fixed(AvroString()),
    "json": _fixed(AvroString()), "jsonb": _fixed(AvroString()), "xml": _fixed(AvroString()),
    "inet": _fixed(AvroString()), "cidr": _fixed(AvroString()),
    "macaddr": _fixed(AvroString()), "uuid": _fixed(AvroUUID()), "bytea": _fixed(AvroBytes()),
    "date": _fixed(AvroDate()), "time": _fixed(AvroTimeMicros()),
    "timestamp": _fixed(AvroTimestampMicros()), "timestamptz": _fixed(AvroTimestampMicros()),
}  # fmt: skip


def avro_type_for_postgres(type_name: str, column: psycopg.Column) -> AvroType:
    """Map a PostgreSQL type (``pg_type.typname``) of a result column to an Avro type.

    Raises:
        SourceError: The type has no mapping; the message names the column.
    """
    rule = _TO_AVRO.get(type_name)
    if rule is None:
        raise SourceError("Unsupported PostgreSQL type: cast the column in SQL (e.g. ::text)",
                          column=column.name, postgres_type=type_name)  # fmt: skip
    return rule(column)


class PostgresReader(SourceAdapter):
    """Loads PostgreSQL query results into DuckDB.

    Args:
        dsn: libpq connection string or URL, e.g. ``host=db port=5432 dbname=lims user=flow``.
        logger: Where progress goes.
        connection: The DuckDB staging database; default: DuckDB's default connection.
        page_size: Rows per fetch and per DuckDB append.
    """

    sql_dialect = "postgres"

    def __init__(
        self, dsn: str, logger: logging.Logger | None = None, *,
        connection: duckdb.DuckDBPyConnection | None = None, page_size: int = 10_000,
    ) -> None:  # fmt: skip
        super().__init__(logger, connection=connection)
        self.dsn = dsn
        self.page_size = page_size
        self._pg: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> None:
        """Connect to PostgreSQL."""
        try:
            self._pg = await psycopg.AsyncConnection.connect(self.dsn)
        except psycopg.Error as exc:
            raise SourceError(f"Cannot connect to PostgreSQL: {exc}") from exc
        for type_name in _TEXT_TYPES:
            self._pg.adapters.register_loader(type_name, TextLoader)

    async def close(self) -> None:
        """Close the PostgreSQL connection."""
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
                raise SourceError(f"PostgreSQL rejected the query: {exc}", table=name,
                                  sql=sql) from exc  # fmt: skip
            columns = cur.description or []
        schema = ValueSchema(name, namespace)
        for column in columns:
            type_name = await self._type_name(column.type_code)
            schema.add_field(column.name, avro_type_for_postgres(type_name, column))
        await self.pg.rollback()
        return schema

    async def _type_name(self, oid: int) -> str:
        info = self.pg.adapters.types.get(oid)
        if info is not None:
            return info.name
        async with self.pg.cursor() as cur:
            await cur.execute("SELECT typname FROM pg_type WHERE oid = %s", [oid])
            row = await cur.fetchone()
        return str(row[0]) if row else f"oid {oid}"

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        page_schema = self.table_schema.get_pyarrow(technical=False)
        try:
            async with self.pg.cursor(name="flow_load") as cur:
                await cur.execute(sql)  # type: ignore[arg-type]
                while rows := await cur.fetchmany(self.page_size):
                    await self.insert_page(duckdb_table, rows_to_arrow(rows, page_schema))
        except psycopg.Error as exc:
            raise SourceError(f"Reading from PostgreSQL failed: {exc}", table=duckdb_table,
                              sql=sql) from exc  # fmt: skip
        finally:
            await self.pg.rollback()

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        source = source_table_of(sql, "postgres")
        if source is None:
            self.logger.info("no data dictionary lookup: not a single-table query table=%s",
                             schema.name)  # fmt: skip
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
                    "ORDER BY attnum", (_regclass_text(source),),
                )  # fmt: skip
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
