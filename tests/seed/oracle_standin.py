"""An Oracle stand-in for the documentation's LABWARE flow: python-oracledb's async API over DuckDB.

No Oracle server can run here, and the existing Oracle tests
(``tests/producer_lib/sources/test_oracle_reader.py``) only test pure functions and an
unreachable server. So the seed test replaces exactly one function, ``oracledb.connect_async``,
with :func:`connect_async` below, and everything above it is the real ``OracleReader``: its
``SELECT * FROM (sql) WHERE 1 = 0`` describe, its paged ``fetchmany`` copy, its data dictionary
queries with ``:owner``/``:table_name`` binds. What answers them is a DuckDB database holding
``LIMSPRD.SAMPLE_PLAN`` and the four dictionary views the reader reads (``ALL_CONSTRAINTS``,
``ALL_CONS_COLUMNS``, ``ALL_COL_COMMENTS``, ``ALL_TAB_COMMENTS``); result columns are described
with python-oracledb's own ``DB_TYPE_*`` objects, as Oracle's NUMBER/VARCHAR2/DATE would be.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any

import duckdb
import oracledb

USER, PASSWORD, DSN = "labware_reader", "stand-in pw/with@signs", "standin.example:1521/LIMS"
SECRET = f"{USER}/{PASSWORD}@{DSN}"  # the secret "Labware-Source" as user/password@dsn


def _date(*parts: int) -> datetime:
    """An Oracle DATE as python-oracledb returns it: no time zone."""
    return datetime(*parts)  # noqa: DTZ001


SAMPLE_PLAN = [  # PLAN_ID, PLANT_ID, NAME, TARGET, CHANGED_ON
    (1, 10, "Daily water", Decimal("7.50"), _date(2024, 5, 1, 8, 0)),
    (2, 10, "Weekly resin", Decimal("0.25"), _date(2024, 5, 2, 9, 30)),
    (3, 20, "Monthly audit", None, _date(2024, 5, 3, 10, 15)),
]

_SETUP = """
CREATE SCHEMA LIMSPRD;
CREATE TABLE LIMSPRD.PLANT (ID INTEGER PRIMARY KEY, NAME VARCHAR);
CREATE TABLE LIMSPRD.SAMPLE_PLAN (PLAN_ID BIGINT NOT NULL, PLANT_ID INTEGER, NAME VARCHAR,
    TARGET DECIMAL(12, 2), CHANGED_ON TIMESTAMP);
CREATE TABLE all_constraints (owner VARCHAR, constraint_name VARCHAR, constraint_type VARCHAR,
    table_name VARCHAR, r_owner VARCHAR, r_constraint_name VARCHAR);
CREATE TABLE all_cons_columns (owner VARCHAR, constraint_name VARCHAR, column_name VARCHAR,
    position INTEGER);
CREATE TABLE all_col_comments (owner VARCHAR, table_name VARCHAR, column_name VARCHAR,
    comments VARCHAR);
CREATE TABLE all_tab_comments (owner VARCHAR, table_name VARCHAR, comments VARCHAR);
INSERT INTO all_constraints VALUES
    ('LIMSPRD', 'PLANT_PK', 'P', 'PLANT', NULL, NULL),
    ('LIMSPRD', 'SAMPLE_PLAN_PK', 'P', 'SAMPLE_PLAN', NULL, NULL),
    ('LIMSPRD', 'SP_PLANT_FK', 'R', 'SAMPLE_PLAN', 'LIMSPRD', 'PLANT_PK');
INSERT INTO all_cons_columns VALUES ('LIMSPRD', 'PLANT_PK', 'ID', 1),
    ('LIMSPRD', 'SAMPLE_PLAN_PK', 'PLAN_ID', 1), ('LIMSPRD', 'SP_PLANT_FK', 'PLANT_ID', 1);
INSERT INTO all_col_comments VALUES
    ('LIMSPRD', 'SAMPLE_PLAN', 'NAME', 'Name of the sample plan');
INSERT INTO all_tab_comments VALUES ('LIMSPRD', 'SAMPLE_PLAN', 'Sample plans of the lab');
"""


def database() -> duckdb.DuckDBPyConnection:
    """A fresh stand-in database (its own DuckDB, not the flow's staging connection)."""
    conn = duckdb.connect()
    conn.execute(_SETUP)
    conn.executemany("INSERT INTO LIMSPRD.SAMPLE_PLAN VALUES (?, ?, ?, ?, ?)", SAMPLE_PLAN)
    return conn


def _described(name: str, duck_type: str) -> tuple[Any, ...]:
    """A python-oracledb description entry for a DuckDB column type, as Oracle would give it."""
    decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", duck_type.replace(" ", ""))
    if decimal:
        return (name, oracledb.DB_TYPE_NUMBER, 0, 0, int(decimal[1]), int(decimal[2]), True)
    fixed = {"INTEGER": (oracledb.DB_TYPE_NUMBER, 9, 0), "BIGINT": (oracledb.DB_TYPE_NUMBER, 18, 0),
             "VARCHAR": (oracledb.DB_TYPE_VARCHAR, 0, 0),
             "TIMESTAMP": (oracledb.DB_TYPE_DATE, 0, 0)}  # fmt: skip
    db_type, precision, scale = fixed[duck_type]
    size = 4000 if db_type is oracledb.DB_TYPE_VARCHAR else 0  # VARCHAR2(4000)
    return (name, db_type, size, size, precision, scale, True)


class Cursor:
    """The part of ``oracledb.AsyncCursor`` that OracleReader uses."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self._conn = conn.cursor()
        self.arraysize = 100
        self.description: list[tuple[Any, ...]] | None = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()

    async def execute(self, sql: str, binds: dict[str, Any] | None = None) -> None:
        """Run ``sql``; Oracle's ``:name`` binds become DuckDB's ``$name``."""
        query = re.sub(r"(?<!:):(\w+)", r"$\1", sql)
        try:
            relation = self._conn.execute(query, binds or {})
        except duckdb.Error as exc:
            raise oracledb.DatabaseError(f"ORA-00900: stand-in: {exc}") from exc
        self._rows = relation.fetchall()
        if not binds:  # the dictionary queries' descriptions are not read
            described = self._conn.execute(f"DESCRIBE {query}").fetchall()
            self.description = [_described(row[0], row[1]) for row in described]

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
    """The part of ``oracledb.AsyncConnection`` that OracleReader uses."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, user: str) -> None:
        self._conn = conn
        self.username = user
        self.current_schema: str | None = None
        self.outputtypehandler: Any = None
        self.closed = False

    def cursor(self) -> Cursor:
        return Cursor(self._conn)

    async def close(self) -> None:
        self.closed = True


class StandIn:
    """``connect_async`` for the monkeypatch, and the connections it handed out."""

    def __init__(self) -> None:
        self.db = database()
        self.connections: list[Connection] = []

    async def connect_async(self, *, user: str, password: str, dsn: str) -> Connection:
        if (user, password, dsn) != (USER, PASSWORD, DSN):
            raise oracledb.DatabaseError("ORA-01017: invalid username/password; logon denied")
        connection = Connection(self.db, user)
        self.connections.append(connection)
        return connection
