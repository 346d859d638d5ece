"""An Oracle stand-in for the documentation's LABWARE flow: python-oracledb's async API over DuckDB.

No Oracle server can run here. So the seed test replaces exactly one function,
``oracledb.connect_async``, with :meth:`StandIn.connect_async` below, and everything above it is
the real ``OracleReader``: its ``SELECT * FROM (sql) WHERE 1 = 0`` describe, its Arrow fetch
(``fetch_df_batches``), its data dictionary queries with ``:owner``/``:table_name`` binds. What
answers them (``tests/support/oracle_standin.py``) is a DuckDB database holding
``LIMSPRD.SAMPLE_PLAN`` and the four dictionary views the reader reads (``ALL_CONSTRAINTS``,
``ALL_CONS_COLUMNS``, ``ALL_COL_COMMENTS``, ``ALL_TAB_COMMENTS``); result columns are described
with python-oracledb's own ``DB_TYPE_*`` objects, as Oracle's NUMBER/VARCHAR2/DATE would be.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import duckdb
import oracledb

from tests.support.oracle_standin import Connection

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
