import asyncio
import json
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from producer_lib.errors import SourceError
from producer_lib.schema import AvroDecimal, AvroLong, AvroString
from producer_lib.sources import DuckDBReader


@pytest.fixture
def conn():
    connection = duckdb.connect()
    yield connection
    connection.close()


def _load(conn, table, sql, **options):
    async def run():
        async with DuckDBReader(connection=conn, **options) as reader:
            await reader.load(table, sql, "TEST", "FILES")
            return reader.table_schema

    return asyncio.run(run())


def _rows(conn, table):
    return conn.execute(f'select * from "{table}" order by all').fetchall()


def test_csv_file(conn, tmp_path):
    path = tmp_path / "plans.csv"
    path.write_text("ID,NAME\n1,alpha\n2,beta\n")
    schema = _load(conn, "PLANS", f"select * from read_csv('{path}')")
    assert [f.name for f in schema.fields.values()] == ["ID", "NAME"]
    assert schema.field("NAME").type == AvroString()
    assert schema.namespace == "TEST" and schema.properties["sourceSystem"] == "FILES"
    assert _rows(conn, "PLANS") == [(1, "alpha"), (2, "beta")]


def test_parquet_file_keeps_decimal_types(conn, tmp_path):
    path = tmp_path / "prices.parquet"
    prices = pa.array([Decimal("1.50"), Decimal("2.25")], pa.decimal128(10, 2))
    pq.write_table(pa.table({"ID": pa.array([1, 2], pa.int64()), "PRICE": prices}), path)
    schema = _load(conn, "PRICES", f"select * from '{path}'")
    assert schema.field("PRICE").type == AvroDecimal(10, 2)
    assert _rows(conn, "PRICES") == [(1, Decimal("1.50")), (2, Decimal("2.25"))]


def test_json_file_with_projection(conn, tmp_path):
    path = tmp_path / "items.json"
    path.write_text("\n".join(json.dumps({"id": i, "name": f"n{i}"}) for i in range(3)))
    schema = _load(conn, "ITEMS", f"select id * 10 as \"ID x10\" from read_json('{path}')")
    assert list(schema.fields) == ["ID x10"]
    assert _rows(conn, "ITEMS") == [(0,), (10,), (20,)]


@pytest.mark.parametrize("use_extension", [True, False], ids=["delta-extension", "delta-rs"])
def test_delta_table_offline(conn, tmp_path, use_extension):
    path = tmp_path / "orders"
    write_deltalake(str(path), pa.table({"ID": [1, 2, 3], "CITY": ["a", "b", "c"]}))
    write_deltalake(str(path), pa.table({"ID": [4], "CITY": ["d"]}), mode="append")
    schema = _load(
        conn,
        "ORDERS",
        f"select * from delta_scan('{path}') where ID > 1",
        use_delta_extension=use_extension,
    )
    assert schema.field("ID").type == AvroLong()
    assert _rows(conn, "ORDERS") == [(2, "b"), (3, "c"), (4, "d")]


@pytest.mark.parametrize("name", ["表", "x☃", "é", "Größe", "it's"])
@pytest.mark.parametrize("use_extension", [True, False], ids=["delta-extension", "delta-rs"])
def test_delta_tables_of_any_name(conn, tmp_path, use_extension, name):
    """DuckDB's delta extension drops a trailing non-ASCII character of a plain local path.

    The reader gives it a percent-encoded file URL instead (issue "silent damage", item 7).
    """
    path = tmp_path / "SHOP" / name
    write_deltalake(str(path), pa.table({"ID": [1, 2]}))
    quoted = str(path).replace("'", "''")
    _load(conn, "T", f"select * from delta_scan('{quoted}')", use_delta_extension=use_extension)
    assert _rows(conn, "T") == [(1,), (2,)]


def test_delta_scan_location_reads_any_name_with_the_extension(conn, tmp_path):
    """What a flow's own SQL passes to ``delta_scan`` for such a table (docs/TABLES.md)."""
    from producer_lib.staging import delta_scan_location, load_packaged_extension

    path = tmp_path / "SHOP" / "x表"
    write_deltalake(str(path), pa.table({"ID": [1, 2]}))
    load_packaged_extension(conn, "delta")
    with pytest.raises(duckdb.IOException):  # the extension's own bug, still there
        conn.execute(f"select count(*) from delta_scan('{path}')").fetchall()
    location = delta_scan_location(str(path))
    assert conn.execute(f"select count(*) from delta_scan('{location}')").fetchall() == [(2,)]


def test_missing_delta_table_is_a_source_error(conn, tmp_path):
    with pytest.raises(SourceError):
        _load(
            conn, "X", f"select * from delta_scan('{tmp_path / 'nope'}')", use_delta_extension=False
        )


def test_attached_database_brings_its_primary_key_and_comments(conn, tmp_path):
    other = duckdb.connect(str(tmp_path / "lims.duckdb"))
    other.execute("create schema limsprd")
    other.execute("create table limsprd.sample_plan (id integer primary key, name varchar)")
    other.execute("comment on column limsprd.sample_plan.name is 'plan name'")
    other.execute("comment on table limsprd.sample_plan is 'sample plans'")
    other.execute("insert into limsprd.sample_plan values (1, 'a'), (2, 'b')")
    other.close()
    conn.execute(f"attach '{tmp_path / 'lims.duckdb'}' as lims (read_only)")
    schema = _load(conn, "SAMPLE_PLAN", "select * from lims.limsprd.sample_plan")
    assert schema.pks == ("id",)
    assert schema.field("name").doc == "plan name"
    assert schema.doc == "sample plans"
    assert conn.execute('select count(*) from "SAMPLE_PLAN"').fetchone() == (2,)


def test_duplicate_keys_fail_the_load(conn):
    conn.execute("create table src (id integer primary key, v integer)")
    conn.execute("insert into src select range, range from range(5)")
    with pytest.raises(SourceError, match="duplicate") as info:
        _load(conn, "DUP", "select 1 as id, v from src")
    assert info.value.table == "DUP"


def test_bad_sql_names_the_table(conn):
    with pytest.raises(SourceError) as info:
        _load(conn, "BAD", "select * from no_such_table")
    assert info.value.table == "BAD"


def test_a_column_mapped_delta_table_is_refused_by_the_delta_rs_fallback(conn, tmp_path):
    """delta-rs reads such a table as nulls without an error: the fallback must not load it."""
    path = tmp_path / "mapped"
    write_deltalake(str(path), pa.table({"ID": [1], "CITY": ["a"]}))
    log = path / "_delta_log" / "00000000000000000000.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    for action in actions:  # as a writer that maps names by id would have set it
        if "metaData" in action:
            action["metaData"]["configuration"]["delta.columnMapping.mode"] = "name"
    log.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    with pytest.raises(SourceError, match="column-mapped"):
        _load(conn, "X", f"select * from delta_scan('{path}')", use_delta_extension=False)
