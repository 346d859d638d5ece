"""PostgresReader type mapping on the fast path (DuckDB's postgres_scanner) and the psycopg one.

Both paths must stage the same values: the scanner path is checked against the psycopg path,
which is what the reader gave before, and against the values written in PostgreSQL.
"""

import asyncio
import datetime as dt
import logging
from decimal import Decimal

import duckdb
import psycopg
import pytest

from producer_lib.errors import SourceError
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
    AvroUUID,
)
from producer_lib.sources import PostgresReader
from producer_lib.sources.postgres_scan import PostgresScan, whole_table_of

UTC = dt.UTC
# column: (PostgreSQL type, a value as SQL, Avro type, the staged value)
COLUMNS = {
    "small": ("int2", "-7", AvroShort(), -7),
    "whole": ("int4", "2147483647", AvroInt(), 2147483647),
    "big": ("int8", "-9007199254740993", AvroLong(), -9007199254740993),
    "single": ("float4", "1.5", AvroFloat(), 1.5),
    "double": ("float8", "0.1", AvroDouble(), 0.1),
    "flag": ("boolean", "true", AvroBoolean(), True),
    "price": ("numeric(12,3)", "123456789.125", AvroDecimal(12, 3), Decimal("123456789.125")),
    "wide": (
        "numeric(38,2)",
        "123456789012345678901234567890123456.78",
        AvroDecimal(38, 2),
        Decimal("123456789012345678901234567890123456.78"),
    ),
    "free": ("numeric", "-12345.1234567890000", AvroDecimal(38, 10), Decimal("-12345.123456789")),
    "body": ("text", "'it''s ünïcode'", AvroString(), "it's ünïcode"),
    "label": ("varchar(5)", "'abc'", AvroNVarchar(5), "abc"),
    "code": ("char(4)", "'ab'", AvroNVarchar(4), "ab  "),
    "doc": ("json", """'{"b":  [1, 2]}'""", AvroString(), '{"b":  [1, 2]}'),
    "docb": ("jsonb", """'{"b":[1,2], "a":null}'""", AvroString(), '{"a": null, "b": [1, 2]}'),
    "page": ("xml", "'<a>1</a>'", AvroString(), "<a>1</a>"),
    "addr": ("inet", "'10.0.0.1/8'", AvroString(), "10.0.0.1/8"),
    "guid": (
        "uuid",
        "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
        AvroUUID(),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    "blob": ("bytea", r"'\x00ff10'", AvroBytes(), b"\x00\xff\x10"),
    "day": ("date", "'2024-02-29'", AvroDate(), dt.date(2024, 2, 29)),
    "clock": ("time", "'23:59:58.123456'", AvroTimeMicros(), dt.time(23, 59, 58, 123456)),
    "naive": (
        "timestamp",
        "'2024-01-02 03:04:05.678901'",
        AvroTimestampMicros(),
        dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    ),
    "zoned": (
        "timestamptz",
        "'2024-07-01 12:00:00+02'",
        AvroTimestampMicros(),
        dt.datetime(2024, 7, 1, 10, 0, tzinfo=UTC),
    ),
    "ints": ("int4[]", "'{1,NULL,3}'", AvroArray(AvroInt(), True), [1, None, 3]),
    "prices": (
        "numeric(5,2)[]",
        "'{1.5,-2.25}'",
        AvroArray(AvroDecimal(5, 2), True),
        [Decimal("1.50"), Decimal("-2.25")],
    ),
    "tags": ("text[]", "'{a,NULL,\"b c\"}'", AvroArray(AvroString(), True), ["a", None, "b c"]),
    "docs": (
        "jsonb[]",
        """ARRAY['{"x": 1}'::jsonb]""",
        AvroArray(AvroString(), True),
        ['{"x": 1}'],
    ),
    "stamps": (
        "timestamp[]",
        "'{\"2024-01-02 03:04:05\"}'",
        AvroArray(AvroTimestampMicros(), True),
        [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)],
    ),
}


@pytest.fixture(scope="module")
def typed(postgres_dsn):
    columns = ", ".join(f'"{name}" {spec[0]}' for name, spec in COLUMNS.items())
    values = ", ".join(f"{spec[1]}::{spec[0]}" for spec in COLUMNS.values())
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS typed CASCADE; CREATE SCHEMA typed")
        conn.execute(f"CREATE TABLE typed.t (id int PRIMARY KEY, {columns})")
        conn.execute(f"INSERT INTO typed.t VALUES (1, {values}), (2{', NULL' * len(COLUMNS)})")
    return postgres_dsn


def _load(dsn, table, sql, **options):
    conn = duckdb.connect()
    conn.execute("SET TimeZone = 'America/New_York'")  # a naive timestamp is still read as UTC

    async def run():
        async with PostgresReader(
            dsn, logging.getLogger("flow"), connection=conn, **options
        ) as reader:
            await reader.load(table, sql, "LIMS")
            return reader

    return asyncio.run(run()), conn


def _rows(conn, table):
    return conn.sql(f'SELECT * FROM "{table}" ORDER BY id').to_arrow_table().to_pylist()


@pytest.mark.parametrize("use_scanner", [True, False], ids=["scanner", "psycopg"])
def test_every_type_is_mapped_and_staged_exactly(typed, use_scanner):
    reader, conn = _load(typed, "T", "select * from typed.t", use_scanner=use_scanner)
    assert reader.use_scanner is use_scanner
    types = {name: f.type for name, f in reader.table_schema.fields.items()}
    assert types == {"id": AvroInt(), **{name: spec[2] for name, spec in COLUMNS.items()}}
    assert reader.table_schema.pks == ("id",)
    values, nulls = _rows(conn, "T")
    assert values == {"id": 1, **{name: spec[3] for name, spec in COLUMNS.items()}}
    assert nulls == {"id": 2, **dict.fromkeys(COLUMNS)}


def test_scanner_and_psycopg_stage_the_same_table(typed):
    _, fast = _load(typed, "T", "select * from typed.t")
    _, slow = _load(typed, "T", "select * from typed.t", use_scanner=False)
    assert fast.sql('DESCRIBE "T"').fetchall() == slow.sql('DESCRIBE "T"').fetchall()
    assert _rows(fast, "T") == _rows(slow, "T")


def test_any_select_is_pushed_down_as_written(typed):
    sql = """with x as (select id, 'it''s $1 %s' as "Odd Name", price * 2 as twice
             from typed.t) select * from x where id = 1"""
    reader, conn = _load(typed, "Q", sql)
    assert conn.sql('SELECT * FROM "Q"').fetchall() == [(1, "it's $1 %s", Decimal("246913578.250"))]
    assert reader.loads["LIMS.Q"].sql == sql


def test_reader_detaches_postgres_from_the_staging_database(typed):
    _, conn = _load(typed, "T", "select id from typed.t")
    names = [row[0] for row in conn.sql("SELECT database_name FROM duckdb_databases()").fetchall()]
    assert not [name for name in names if name.startswith("__postgres")]
    assert conn.sql('SELECT count(*) FROM "T"').fetchone() == (2,)


@pytest.mark.parametrize("use_scanner", [True, False], ids=["scanner", "psycopg"])
def test_numeric_with_too_many_decimals_names_the_column(typed, use_scanner):
    sql = "select 1 as id, 1.5::numeric as fine, 0.12345678901::numeric as too_fine"
    with pytest.raises(SourceError) as info:
        _load(typed, "N", sql, use_scanner=use_scanner)
    assert info.value.column == "too_fine"


@pytest.mark.parametrize(
    ("sql", "column", "postgres_type"),
    [
        ("select interval '1 day' as span", "span", "interval"),
        ("select array[interval '1 day'] as spans", "spans", "interval[]"),
        ("select '12:00+02'::timetz as at", "at", "timetz"),
        ("select 1.5::numeric(40,2) as huge", "huge", "numeric"),
    ],
    ids=["interval", "interval-array", "timetz", "numeric-over-38-digits"],
)
def test_type_it_cannot_map_names_the_column(typed, sql, column, postgres_type):
    with pytest.raises(SourceError, match="cast the column") as info:
        _load(typed, "U", sql)
    assert (info.value.column, info.value.postgres_type) == (column, postgres_type)


def test_multidimensional_array_names_the_array_columns(typed):
    with pytest.raises(SourceError, match="array columns: grid") as info:
        _load(typed, "M", "select 1 as id, array[[1, 2], [3, 4]] as grid")
    assert info.value.table == "M"


def test_failure_while_copying_never_shows_the_password(typed):
    dsn = f"{typed} password=s3cr3t-pw"  # trust authentication ignores it
    with pytest.raises(SourceError, match="division by zero") as info:
        _load(dsn, "Z", "select 1 / (g - 2) as x from generate_series(1, 3) g")
    assert "s3cr3t-pw" not in str(info.value) and "s3cr3t-pw" not in repr(info.value)
    assert info.value.__cause__ is None or "s3cr3t-pw" not in str(info.value.__cause__)


def test_cancelled_load_stops_the_copy_and_frees_the_staging_database(typed):
    conn = duckdb.connect()

    async def run():
        async with PostgresReader(typed, connection=conn) as reader:
            load = asyncio.create_task(
                reader.load(
                    "BIG",
                    "select a.g::int8 * b.g as g from generate_series(1, 20000) "
                    "a(g), generate_series(1, 20000) b(g)",
                )
            )
            await asyncio.sleep(1.5)
            load.cancel()
            started = asyncio.get_running_loop().time()
            with pytest.raises(asyncio.CancelledError):
                await load
            await reader.run_locked(conn.execute, "SELECT 1")  # waits for the copy's lock
            return asyncio.get_running_loop().time() - started

    assert asyncio.run(run()) < 10  # the whole copy would take minutes


def test_concurrent_loads_on_one_reader_keep_their_own_columns(typed):
    conn = duckdb.connect()

    async def run():
        async with PostgresReader(typed, connection=conn) as reader:
            await asyncio.gather(
                reader.load("A", "select id, price, tags from typed.t"),
                reader.load("B", "select label, id from typed.t where id = 1"),
            )

    asyncio.run(run())
    assert conn.sql('SELECT * FROM "A" ORDER BY id').fetchall() == [
        (1, Decimal("123456789.125"), ["a", None, "b c"]),
        (2, None, None),
    ]
    assert conn.sql('SELECT * FROM "B"').fetchall() == [("abc", 1)]


def test_attach_failure_names_no_dsn_and_no_password():
    scan = PostgresScan(duckdb.connect(), "host=127.0.0.1 port=1 user=flow password=s3cr3t-pw")
    with pytest.raises(SourceError, match="Connection refused") as info:
        scan.attach()  # DuckDB's own message shows the whole connection string
    assert "s3cr3t-pw" not in str(info.value) and "password" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        ("select * from lineitem", (None, "lineitem")),
        ('SELECT a, "B" FROM s."T"', ("s", "T")),
        ("select * from t where a > 1", None),
        ("select a as b from t", None),
        ("select t.a from t", None),
        ("select * from t limit 3", None),
        ("select distinct a from t", None),
        ("select * from t join u on true", None),
        ("with x as (select 1) select * from x", None),
        ("select * from t tablesample system (1)", None),
        ("select * from only t", None),
        ("select 1", None),
    ],
)
def test_whole_table_reads_are_recognised_and_nothing_else(sql, table):
    found = whole_table_of(sql)
    assert (found and (found.schema, found.name)) == (table or None)


NATIVE = [
    name
    for name, spec in COLUMNS.items()
    if "[]" not in spec[0] and spec[0] not in ("numeric", "json", "jsonb", "xml", "inet")
]


@pytest.mark.parametrize(
    "sql",
    [
        "select * from typed.native",
        f"select id, {', '.join(NATIVE)} from typed.native",
    ],
    ids=["star", "columns"],
)
def test_whole_table_scanned_in_parallel_stages_the_same_values(typed, sql):
    with psycopg.connect(typed, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS typed.native AS SELECT id, "
            f"{', '.join(NATIVE)} FROM typed.t"
        )
    reader, fast = _load(typed, "NATIVE", sql)
    assert reader.loads["LIMS.NATIVE"].sql == sql
    setting = "SELECT current_setting('preserve_insertion_order')"
    assert fast.sql(setting).fetchone() == (True,)  # relaxed for the copy only
    _, slow = _load(typed, "NATIVE", sql, use_scanner=False)
    assert _rows(fast, "NATIVE") == _rows(slow, "NATIVE")
    values, nulls = _rows(fast, "NATIVE")
    assert values == {"id": 1, **{name: COLUMNS[name][3] for name in NATIVE}}
    assert nulls == {"id": 2, **dict.fromkeys(NATIVE)}
