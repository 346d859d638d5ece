"""OracleReader: load the result of an Oracle query into a DuckDB staging table.

python-oracledb in thin mode (no Oracle client libraries), async API. Types come from the
query's result description (mapping in :mod:`producer_lib.sources.oracle_dictionary`); keys
and comments from ``ALL_CONSTRAINTS``/``ALL_CONS_COLUMNS``/``ALL_COL_COMMENTS``/
``ALL_TAB_COMMENTS`` when the query reads a single table (unqualified names: the owner is the
session user's current schema).

UNTESTED against a live Oracle server: no Oracle database can run where this was written. The
type mapping and the dictionary handling are unit-tested as pure functions; the connection,
fetch and output type handlers follow the python-oracledb documentation.
"""

from __future__ import annotations

import decimal
import logging
from typing import Any

import duckdb
import oracledb
import pyarrow as pa
from pydantic import SecretStr

from producer_lib.errors import ConfigError, SourceError
from producer_lib.schema import ValueSchema
from producer_lib.settings import OracleConnectionSettings
from producer_lib.sources.adapter import SourceAdapter, rows_to_arrow
from producer_lib.sources.dictionary import SourceTable, apply_dictionary, source_table_of
from producer_lib.sources.oracle_dictionary import (
    COLUMN_COMMENTS_SQL,
    CONSTRAINTS_SQL,
    TABLE_COMMENT_SQL,
    avro_type_for_description,
    dictionary_from_rows,
)


def _output_type_handler(cursor: Any, metadata: Any) -> Any:
    """Fetch NUMBER as Decimal (exact), CLOB/NCLOB as str and BLOB as bytes (no LOB locators)."""
    if metadata.type_code is oracledb.DB_TYPE_NUMBER and (metadata.scale or 0) != 0:
        return cursor.var(decimal.Decimal, arraysize=cursor.arraysize)
    if metadata.type_code in (oracledb.DB_TYPE_CLOB, oracledb.DB_TYPE_NCLOB):
        return cursor.var(oracledb.DB_TYPE_LONG, arraysize=cursor.arraysize)
    if metadata.type_code is oracledb.DB_TYPE_BLOB:
        return cursor.var(oracledb.DB_TYPE_LONG_RAW, arraysize=cursor.arraysize)
    return None


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
        self, user: str | OracleConnectionSettings, password: str | logging.Logger | None = None,
        dsn: str | None = None, logger: logging.Logger | None = None, *,
        connection: duckdb.DuckDBPyConnection | None = None, page_size: int = 10_000,
    ) -> None:  # fmt: skip
        if isinstance(user, OracleConnectionSettings):
            if isinstance(password, logging.Logger):
                logger, password = password, None
            if password is not None or dsn is not None:
                raise ConfigError("OracleReader(settings, logger): user, password and dsn "
                                  "come from the settings", secret=user.secret_name)  # fmt: skip
            user, secret, dsn = user.user, user.password, user.dsn
        elif isinstance(password, str) and dsn:
            secret = SecretStr(password)
        else:
            raise ConfigError("OracleReader needs OracleConnectionSettings or user, password "
                              "and dsn")  # fmt: skip
        super().__init__(logger, connection=connection)
        self._credentials = (user, secret, dsn)
        self.page_size = page_size
        self._ora: Any = None

    async def open(self) -> None:
        """Connect to Oracle."""
        user, secret, dsn = self._credentials
        try:
            self._ora = await oracledb.connect_async(
                user=user, password=secret.get_secret_value(), dsn=dsn
            )
        except oracledb.Error as exc:
            raise SourceError(f"Cannot connect to Oracle: {exc}", dsn=dsn, user=user) from exc
        self._ora.outputtypehandler = _output_type_handler

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
        schema = ValueSchema(name, namespace)
        for item in description:
            schema.add_field(item[0], avro_type_for_description(item))
        return schema

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        page_schema = self.table_schema.get_pyarrow(technical=False)
        try:
            with self._ora.cursor() as cur:
                cur.arraysize = self.page_size
                await cur.execute(sql)
                while rows := await cur.fetchmany(self.page_size):
                    await self.insert_page(duckdb_table, rows_to_arrow(rows, page_schema))
        except oracledb.Error as exc:
            raise SourceError(f"Reading from Oracle failed: {exc}", table=duckdb_table,
                              sql=sql) from exc  # fmt: skip

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        source = source_table_of(sql, "oracle")
        if source is None:
            self.logger.info("no data dictionary lookup: not a single-table query table=%s",
                             schema.name)  # fmt: skip
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
