"""python-oracledb's async API over DuckDB: the part OracleReader uses, for tests without Oracle.

No Oracle server can run here. A test replaces exactly one function, ``oracledb.connect_async``,
with a stand-in's, and everything above it is the real ``OracleReader``: its ``SELECT * FROM
(sql) WHERE 1 = 0`` describe, its Arrow fetch (``fetch_df_batches`` with a
``requested_schema``), its data dictionary queries with ``:owner``/``:table_name`` binds.

What answers is a DuckDB database. Result columns are described with python-oracledb's own
``DB_TYPE_*`` objects, as Oracle would describe them: DuckDB's DECIMAL(p,s) as NUMBER(p,s),
INTEGER as NUMBER(9), BIGINT as NUMBER(18), DOUBLE as BINARY_DOUBLE, VARCHAR as VARCHAR2(4000),
TIMESTAMP as DATE, TIMESTAMPTZ as TIMESTAMP(6) WITH TIME ZONE, BLOB as BLOB; a test names other
Oracle types per column (CLOB, RAW(16), TIMESTAMP(6), ...) with ``oracle_types``.

``fetch_df_batches`` yields real ``oracledb.DataFrame`` objects (``oracledb.from_arrow``) and
behaves as the python-oracledb documentation says data frames do: timestamps carry no zone and
a TIMESTAMP WITH TIME ZONE comes back as its wall-clock time with the offset dropped (here: the
wall clock in :data:`SESSION_TIME_ZONE`), a ``requested_schema`` renames and converts each
column, and a value that cannot be represented in the requested type is an error (pyarrow's
safe cast). ``SYS_EXTRACT_UTC`` exists as a DuckDB macro. What it cannot show: Oracle's own
conversions (NUMBER to decimal128 beyond DuckDB's, LOB streaming, TIMESTAMP(9) truncation).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import duckdb
import oracledb
import pyarrow as pa
import pyarrow.compute as pc

SESSION_TIME_ZONE = "America/New_York"  # not UTC: a dropped offset shows
OracleType = tuple[Any, int, int, int]  # DB_TYPE_*, size, precision, scale

_FIXED: dict[str, OracleType] = {
    "INTEGER": (oracledb.DB_TYPE_NUMBER, 0, 9, 0),
    "BIGINT": (oracledb.DB_TYPE_NUMBER, 0, 18, 0),
    "DOUBLE": (oracledb.DB_TYPE_BINARY_DOUBLE, 0, 0, 0),
    "VARCHAR": (oracledb.DB_TYPE_VARCHAR, 4000, 0, 0),  # VARCHAR2(4000)
    "TIMESTAMP": (oracledb.DB_TYPE_DATE, 0, 0, 0),
    "TIMESTAMP WITH TIME ZONE": (oracledb.DB_TYPE_TIMESTAMP_TZ, 0, 0, 6),
    "BLOB": (oracledb.DB_TYPE_BLOB, 0, 0, 0),
}


def install_functions(conn: duckdb.DuckDBPyConnection) -> None:
    """Oracle functions the reader's SQL uses, as DuckDB macros."""
    conn.execute("CREATE OR REPLACE MACRO sys_extract_utc(ts) AS timezone('UTC', ts)")


def described(name: str, duck_type: str, oracle_types: Mapping[str, OracleType]) -> tuple:
    """A python-oracledb description entry for a DuckDB column, as Oracle would give it."""
    if name in oracle_types:
        db_type, size, precision, scale = oracle_types[name]
    elif decimal := re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", duck_type.replace(" ", "")):
        db_type, size, precision, scale = (
            oracledb.DB_TYPE_NUMBER,
            0,
            int(decimal[1]),
            int(decimal[2]),
        )
    else:
        db_type, size, precision, scale = _FIXED[duck_type]
    return (name, db_type, size, size, precision, scale, True)


def _oracle_binds(sql: str) -> str:
    """Oracle's ``:name`` binds as DuckDB's ``$name``."""
    return re.sub(r"(?<!:):(\w+)", r"$\1", sql)


class Cursor:
    """The part of ``oracledb.AsyncCursor`` that OracleReader uses."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, oracle_types: Mapping[str, OracleType]):
        self._conn = conn.cursor()
        self._oracle_types = oracle_types
        self.arraysize = 100
        self.description: list[tuple[Any, ...]] | None = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()

    async def execute(self, sql: str, binds: dict[str, Any] | None = None) -> None:
        """Run ``sql``; Oracle's ``:name`` binds become DuckDB's ``$name``."""
        query = _oracle_binds(sql)
        try:
            relation = self._conn.execute(query, binds or {})
        except duckdb.Error as exc:
            raise oracledb.DatabaseError(f"ORA-00900: stand-in: {exc}") from exc
        self._rows = relation.fetchall()
        if not binds:  # the dictionary queries' descriptions are not read
            rows = self._conn.execute(f"DESCRIBE {query}").fetchall()
            self.description = [described(r[0], r[1], self._oracle_types) for r in rows]

    async def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        page, self._rows = (
            self._rows[: size or self.arraysize],
            self._rows[size or self.arraysize :],
        )
        return page

    async def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> tuple[Any, ...] | None:
        rows = await self.fetchmany(1)
        return rows[0] if rows else None


class Connection:
    """The part of ``oracledb.AsyncConnection`` that OracleReader uses.

    Attributes:
        statements: The statements ``fetch_df_batches`` ran, in order.
        batch_rows: Rows of each data frame it yielded.
    """

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        user: str,
        oracle_types: Mapping[str, OracleType] | None = None,
    ) -> None:
        self._conn = conn
        self._oracle_types = dict(oracle_types or {})
        install_functions(conn)
        self.username = user
        self.current_schema: str | None = None
        self.closed = False
        self.statements: list[str] = []
        self.batch_rows: list[int] = []

    def cursor(self) -> Cursor:
        return Cursor(self._conn, self._oracle_types)

    async def fetch_df_batches(
        self,
        statement: str,
        parameters: Any = None,
        size: int | None = None,
        *,
        fetch_decimals: bool | None = None,
        requested_schema: Any = None,
    ) -> AsyncIterator[Any]:
        """Yield ``oracledb.DataFrame`` batches of ``size`` rows, as python-oracledb does."""
        self.statements.append(statement)
        cursor = self._conn.cursor()
        try:
            reader = cursor.sql(_oracle_binds(statement)).to_arrow_reader(size or 100)
        except duckdb.Error as exc:
            raise oracledb.DatabaseError(f"ORA-00900: stand-in: {exc}") from exc
        for batch in reader:
            table = _as_oracle_returns(pa.Table.from_batches([batch]))
            if requested_schema is not None:
                table = _requested(table, pa.schema(requested_schema))
            self.batch_rows.append(table.num_rows)
            yield oracledb.from_arrow(table)
        cursor.close()

    async def close(self) -> None:
        self.closed = True


def _as_oracle_returns(table: pa.Table) -> pa.Table:
    """Zoned timestamps as data frames return them: the session's wall clock, no zone."""
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type) and column.type.tz:
            zoned = column.cast(pa.timestamp(column.type.unit, tz=SESSION_TIME_ZONE))
            column = pc.local_timestamp(zoned)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _requested(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in the names and types of ``schema``; a value that does not fit fails."""
    if len(schema) != table.num_columns:
        raise oracledb.DatabaseError(
            f"DPY-2067: stand-in: {len(schema)} requested columns, {table.num_columns} in the query"
        )
    try:
        columns = [c.cast(f.type, safe=True) for c, f in zip(table.columns, schema, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise oracledb.DatabaseError(f"DPY-3036: stand-in: {exc}") from exc
    return pa.Table.from_arrays(columns, schema=schema)
