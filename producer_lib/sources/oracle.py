"""OracleReader: load the result of an Oracle query into a DuckDB staging table.

python-oracledb in thin mode (no Oracle client libraries), async API. Types come from the
query's result description (mapping in :mod:`producer_lib.sources.oracle_dictionary`); keys
and comments from ``ALL_CONSTRAINTS``/``ALL_CONS_COLUMNS``/``ALL_COL_COMMENTS``/
``ALL_TAB_COMMENTS`` when the query reads a single table (unqualified names: the owner is the
session user's current schema).

Rows arrive as Arrow batches (``AsyncConnection.fetch_df_batches``, python-oracledb >= 3.4):
no Python row tuples. Each column is requested in the Arrow type its Avro type stages as
(:class:`ArrowFetch`): NUMBER(p,s) as decimal128(p,s) (int32/int64 for small scale-0
numbers; a value that does not fit fails the load), DATE and TIMESTAMP as timestamps read as
UTC, CLOB/NCLOB/LONG as large strings and BLOB/LONG RAW as large binaries (no LOB locators),
RAW as binary. Data frames carry no time zone and drop a TIMESTAMP WITH [LOCAL] TIME ZONE's
offset, so those columns are fetched as ``SYS_EXTRACT_UTC(column)``: the instant, in UTC.

UNTESTED against a live Oracle server: no Oracle database can run where this was written. The
type mapping and the dictionary handling are unit-tested as pure functions, and the reader
runs in the tests against a DuckDB stand-in behind python-oracledb's API (real oracledb
DataFrame objects, ``requested_schema`` emulated with pyarrow's safe casts); what oracledb
itself does with a requested schema (its conversions and errors) follows its documentation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import oracledb
import pyarrow as pa
from pydantic import SecretStr

from producer_lib.errors import ConfigError, SourceError
from producer_lib.schema import ValueSchema
from producer_lib.settings import OracleConnectionSettings
from producer_lib.sources.adapter import SourceAdapter, settle
from producer_lib.sources.dictionary import SourceTable, apply_dictionary, source_table_of
from producer_lib.sources.oracle_dictionary import (
    COLUMN_COMMENTS_SQL,
    CONSTRAINTS_SQL,
    TABLE_COMMENT_SQL,
    avro_type_for_description,
    dictionary_from_rows,
)

_LARGE_TYPES = {  # LOBs: one value may be up to 1 GB, so 64-bit offsets per batch
    "DB_TYPE_CLOB": pa.large_string(),
    "DB_TYPE_NCLOB": pa.large_string(),
    "DB_TYPE_LONG": pa.large_string(),
    "DB_TYPE_BLOB": pa.large_binary(),
    "DB_TYPE_LONG_RAW": pa.large_binary(),
}
_WITH_ZONE = frozenset({"DB_TYPE_TIMESTAMP_TZ", "DB_TYPE_TIMESTAMP_LTZ"})


def _type_name(db_type: Any) -> str:
    return str(getattr(db_type, "name", db_type))


@dataclass(frozen=True)
class ArrowFetch:
    """How to fetch a query as Arrow batches that stage without Python rows.

    Attributes:
        requested: The ``requested_schema`` for oracledb: per column the staging Arrow type,
            timestamps without zone (data frames have none), LOBs as large types.
        landing: ``requested`` with the timestamps marked UTC (a zero-copy cast).
        utc_columns: Columns with a time zone, fetched as ``SYS_EXTRACT_UTC(column)``.
    """

    requested: pa.Schema
    landing: pa.Schema
    utc_columns: tuple[str, ...]

    @classmethod
    def plan(cls, description: Sequence[Sequence[Any]], page_schema: pa.Schema) -> ArrowFetch:
        """The fetch of a query with this ``cursor.description`` into ``page_schema``."""
        requested, landing, utc = [], [], []
        for item, target in zip(description, page_schema, strict=True):
            name, db_type = item[0], _type_name(item[1])
            if pa.types.is_timestamp(target.type):  # asked without zone, staged as UTC
                fetch_type, land_type = pa.timestamp(target.type.unit), target.type
            else:
                fetch_type = land_type = _LARGE_TYPES.get(db_type, target.type)
            requested.append(pa.field(name, fetch_type))
            landing.append(pa.field(name, land_type))
            if db_type in _WITH_ZONE:
                utc.append(name)
        return cls(pa.schema(requested), pa.schema(landing), tuple(utc))

    def statement(self, sql: str) -> str:
        """``sql`` itself, or wrapped so that zoned timestamps come out as UTC instants."""
        if not self.utc_columns:
            return sql
        columns = ", ".join(
            f'SYS_EXTRACT_UTC("{name}") AS "{name}"' if name in self.utc_columns else f'"{name}"'
            for name in self.requested.names
        )
        return f"SELECT {columns} FROM ({sql})"

    def to_page(self, frame: Any) -> pa.Table:
        """An oracledb DataFrame (any Arrow stream) as a staging page.

        Raises:
            SourceError: A column is not the type asked for (names the column).
        """
        table = pa.table(frame)
        for field, want in zip(table.schema, self.requested, strict=True):
            if field.type != want.type:
                raise SourceError(
                    "Oracle returned another Arrow type than requested",
                    column=want.name,
                    arrow_type=str(field.type),
                    requested=str(want.type),
                )
        return table.cast(self.landing)


def owner_and_table(source: SourceTable, current_schema: str) -> tuple[str, str]:
    """Dictionary names of a table as SQL spells it: unquoted names are upper case."""

    def fold(name: str, quoted: bool) -> str:
        return name if quoted else name.upper()

    owner = fold(source.schema, source.schema_quoted) if source.schema else current_schema
    return owner, fold(source.name, source.name_quoted)


class OracleReader(SourceAdapter):
    """Loads Oracle query results into DuckDB (python-oracledb, thin mode).

    Two ways to say where the database is::

        OracleReader(OracleConnectionSettings("Labware-Source"), logger)   # from a secret
        OracleReader(user, password, dsn, logger)

    Args:
        user: Database user, or the :class:`~producer_lib.settings.OracleConnectionSettings`
            holding user, password and DSN (then the second argument is the logger).
        password: Its password (never logged); with settings: the logger.
        dsn: ``host:port/service_name`` or a TNS descriptor.
        logger: Where progress goes.
        connection: The DuckDB staging database; default: DuckDB's default connection.
        page_size: Rows per fetch and per DuckDB append.

    Raises:
        ConfigError: Neither form was given completely.
    """

    sql_dialect = "oracle"

    def __init__(
        self,
        user: str | OracleConnectionSettings,
        password: str | logging.Logger | None = None,
        dsn: str | None = None,
        logger: logging.Logger | None = None,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        page_size: int = 10_000,
    ) -> None:
        if isinstance(user, OracleConnectionSettings):
            if isinstance(password, logging.Logger):
                logger, password = password, None
            if password is not None or dsn is not None:
                raise ConfigError(
                    "OracleReader(settings, logger): user, password and dsn come from the settings",
                    secret=user.secret_name,
                )
            settings = user
            user, secret, dsn = settings.user, settings.password, settings.dsn
        elif isinstance(password, str) and dsn:
            secret = SecretStr(password)
        else:
            raise ConfigError(
                "OracleReader needs OracleConnectionSettings or user, password and dsn"
            )
        super().__init__(logger, connection=connection)
        self._credentials = (user, secret, dsn)
        self.page_size = page_size
        self._ora: Any = None
        self._description: list[Any] = []

    async def open(self) -> None:
        """Connect to Oracle."""
        user, secret, dsn = self._credentials
        try:
            self._ora = await oracledb.connect_async(
                user=user, password=secret.get_secret_value(), dsn=dsn
            )
        except oracledb.Error as exc:
            raise SourceError(f"Cannot connect to Oracle: {exc}", dsn=dsn, user=user) from exc

    async def close(self) -> None:
        """Close the Oracle connection."""
        if self._ora is not None:
            await self._ora.close()
            self._ora = None
        await super().close()

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        try:
            with self._ora.cursor() as cur:
                await cur.execute(f"SELECT * FROM ({sql}) WHERE 1 = 0")
                description = cur.description or []
        except oracledb.Error as exc:
            raise SourceError(f"Oracle rejected the query: {exc}", table=name, sql=sql) from exc
        self._description = list(description)
        schema = ValueSchema(name, namespace)
        for item in description:
            schema.add_field(item[0], avro_type_for_description(item))
        return schema

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        fetch = ArrowFetch.plan(self._description, self.table_schema.get_pyarrow(technical=False))
        try:
            async for frame in self._ora.fetch_df_batches(
                fetch.statement(sql), size=self.page_size, requested_schema=fetch.requested
            ):
                page = fetch.to_page(frame)
                if page.num_rows:
                    await settle(self.insert_page(duckdb_table, page))
        except oracledb.Error as exc:
            raise SourceError(
                f"Reading from Oracle failed: {exc}", table=duckdb_table, sql=sql
            ) from exc

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        source = source_table_of(sql, "oracle")
        if source is None:
            self.logger.info(
                "no data dictionary lookup: not a single-table query table=%s", schema.name
            )
            return
        current = (self._ora.current_schema or self._ora.username).upper()
        owner, table = owner_and_table(source, current)
        binds = {"owner": owner, "table_name": table}
        with self._ora.cursor() as cur:
            await cur.execute(CONSTRAINTS_SQL, binds)
            constraints = await cur.fetchall()
            await cur.execute(COLUMN_COMMENTS_SQL, binds)
            comments = await cur.fetchall()
            await cur.execute(TABLE_COMMENT_SQL, binds)
            table_comment = await cur.fetchone()
        dictionary = dictionary_from_rows(
            constraints, comments, table_comment[0] if table_comment else None
        )
        apply_dictionary(schema, dictionary)
