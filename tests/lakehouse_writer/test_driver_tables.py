"""Tables applied in the driver (its decode, the delta-rs engine) agree with Spark's path.

The same Kafka topics are drained four times, by ``lakehouse-writer run --once``, into four
lakehouses: with the driver's path on (the default: each batch is read into the driver whole
and these few rows are decoded by fastavro), on with DuckDB's decode into columns
(``COLUMNS_FROM_ROWS`` 0), on for tables only (``LAKEHOUSE_SMALL_MERGE_ROWS=12``: the batch is
larger, so Spark scans it and the driver collects the small tables' rows from the scan), and
off (``LAKEHOUSE_SMALL_MERGE_ROWS=0``: every table through Spark's decode and MERGE). Every column
of every table must be equal, and equal to what the rows say. The tables cover the types of a
source system's columns and names Avro has to encode, upserts and deletes within and across
transactions, an older transaction produced after a newer one, a reload into a new table,
BEFORE/UPDATE pairs that move a key or not (paired by ``__source_rowid`` or by position), and
an ARCHIVE (the rules in DuckDB fold it as Spark's do).

Real broker, real Spark and Delta. The read path's and the driver's choices have fast unit
tests below; the rules themselves, tests/lakehouse_writer/test_rules_sql.py.
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.read import driver_decode
from lakehouse_writer.read.catalog import CatalogEntry
from lakehouse_writer.read.driver_decode import (
    COLUMNS_FROM_ROWS,
    _after,
    _in_table_columns,
    by_header,
)
from lakehouse_writer.read.scan import Expected
from lakehouse_writer.route.driver_tables import _chunks, _Table
from lakehouse_writer.route.router import Router
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
    AvroTimestamp,
    AvroTimestampMicros,
    ValueSchema,
)
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas

TABLES = ("DELTAS", "RELOAD", "MOVED", "ARCHIVED")


def _schema(name: str) -> ValueSchema:
    schema = ValueSchema(name, "ERP", doc="a source system's table")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(40))
    schema.add_field("ORDER DATE", AvroDate())  # a name Avro encodes
    schema.add_field("AT", AvroTimestampMicros())
    schema.add_field("AT_MS", AvroTimestamp())
    schema.add_field("AMOUNT", AvroDecimal(12, 3))
    schema.add_field("RATIO", AvroDouble())
    schema.add_field("SCORE", AvroFloat())
    schema.add_field("OK", AvroBoolean())
    schema.add_field("QTY", AvroInt())
    schema.add_field("LEVEL", AvroShort())
    schema.add_field("BLOB", AvroBytes())
    schema.add_primary_key("ID")
    return schema


def _row(i: int, change: str, t: int, name: str | None = None, **more: Any) -> dict[str, Any]:
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC) + dt.timedelta(days=i)
    return {
        "ID": i,
        "NAME": name if name is not None else f"n{i}",
        "ORDER DATE": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "AT": at,
        "AT_MS": at.replace(microsecond=123000),
        "AMOUNT": Decimal(f"{i}.125"),
        "RATIO": i / 3,
        "SCORE": 0.5 * i,
        "OK": i % 2 == 0,
        "QTY": None if i == 3 else i * 10,
        "LEVEL": i,
        "BLOB": bytes([i, 0, 255]),
        "__change_type": change,
        "__change_time": T0 + t,
        **more,
    }


def _first_run(bootstrap: str, topics: dict[str, str], schemas: dict[str, ValueSchema]) -> None:
    produce_transaction(
        bootstrap, topics["DELTAS"], schemas["DELTAS"], [_row(i, "I", 1) for i in range(1, 6)]
    )
    reload = [{**_row(0, "T", 2), "__truncate": None}] + [_row(i, "R", 2) for i in (1, 2, 3)]
    produce_transaction(bootstrap, topics["RELOAD"], schemas["RELOAD"], reload)
    for name in ("MOVED", "ARCHIVED"):
        produce_transaction(
            bootstrap, topics[name], schemas[name], [_row(i, "I", 1) for i in (1, 2, 3, 4)]
        )


def _second_run(bootstrap: str, topics: dict[str, str], schemas: dict[str, ValueSchema]) -> None:
    deltas = [
        _row(2, "U", 10, "updated"),
        _row(3, "D", 10),
        _row(4, "X", 10),
        _row(6, "I", 10),
        _row(1, "U", 10, "first"),
        _row(1, "U", 10, "last of its transaction"),
        _row(5, "U", 12, "newer"),
    ]
    produce_transaction(bootstrap, topics["DELTAS"], schemas["DELTAS"], deltas)
    older = [_row(5, "U", 11, "older, produced later"), _row(7, "I", 11)]
    produce_transaction(bootstrap, topics["DELTAS"], schemas["DELTAS"], older)
    produce_transaction(
        bootstrap,
        topics["RELOAD"],
        schemas["RELOAD"],
        [_row(1, "U", 10, "updated"), _row(2, "D", 10), _row(4, "A", 10)],
    )
    moved = [
        _row(1, "B", 10),  # paired with the next row: the key moves
        _row(9, "U", 10, "moved from 1"),
        _row(2, "B", 10, __source_rowid="r2"),  # paired by row id: the key stays
        _row(3, "B", 10, __source_rowid="r3"),  # paired by row id, two rows on: it moves
        _row(4, "U", 10, "a row between"),
        _row(2, "U", 10, "updated in place", __source_rowid="r2"),
        _row(8, "U", 10, "moved from 3", __source_rowid="r3"),
    ]
    produce_transaction(bootstrap, topics["MOVED"], schemas["MOVED"], moved)
    archived = [_row(1, "P", 10, "archived")]
    produce_transaction(bootstrap, topics["ARCHIVED"], schemas["ARCHIVED"], archived)


def _tables(spark: Any, lake: Path) -> dict[str, list[tuple]]:
    out = {}
    for name in TABLES:
        frame = spark.read.format("delta").load(str(lake / "ERP" / name))
        out[name] = sorted(tuple(r) for r in frame.select(*sorted(frame.columns)).collect())
    return out


def _names(spark: Any, lake: Path, table: str) -> list[tuple[int, str]]:
    rows = spark.read.format("delta").load(str(lake / "ERP" / table)).collect()
    return sorted((r.ID, r.NAME) for r in rows)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_the_drivers_path_and_sparks_leave_the_same_tables(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, caplog
):
    schemas = {name: _schema(name) for name in TABLES}
    catalog = new_topic(suffix="_schemas")
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", catalog)
    topics = {name: new_topic(partitions=1) for name in TABLES}
    for name, topic in topics.items():
        publish_schemas(kafka_bootstrap, topic, catalog, schemas[name])
    pattern = "|".join(topics.values())

    def drain(lake: str, small_rows: str, columns_from: int = COLUMNS_FROM_ROWS) -> None:
        monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", small_rows)
        monkeypatch.setenv("LAKEHOUSE_DRIVER_READ_ROWS", small_rows)  # 12: Spark scans it
        monkeypatch.setattr(driver_decode, "COLUMNS_FROM_ROWS", columns_from)
        argv = once_argv(tmp_path / lake, tmp_path / f"{lake}_ckpt", pattern, kafka_bootstrap)
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            assert main(argv) == 0

    _first_run(kafka_bootstrap, topics, schemas)  # 17 rows: 21 offsets with the markers
    caplog.clear()
    drain("driver", "10000")
    assert "batch read into the driver batch=0 rows=17" in caplog.text
    assert "driver tables applied batch=0 tables=4 rows=17 left_to_spark=0" in caplog.text
    caplog.clear()
    drain("columns", "10000", columns_from=0)
    assert "driver tables applied batch=0 tables=4 rows=17 left_to_spark=0" in caplog.text
    caplog.clear()
    drain("scanned", "12")
    assert "batch read into the driver" not in caplog.text
    assert "driver tables applied batch=0 tables=4 rows=17 left_to_spark=0" in caplog.text
    drain("spark", "0")
    _second_run(kafka_bootstrap, topics, schemas)  # 20 rows: 25 offsets, 11 in DELTAS
    caplog.clear()
    drain("driver", "10000")
    assert "batch read into the driver batch=1 rows=20" in caplog.text
    assert "driver tables applied batch=1 tables=4 rows=20 left_to_spark=0" in caplog.text
    caplog.clear()
    drain("columns", "10000", columns_from=0)
    assert "driver tables applied batch=1 tables=4 rows=20 left_to_spark=0" in caplog.text
    caplog.clear()
    drain("scanned", "12")
    assert "batch read into the driver" not in caplog.text
    assert "driver tables applied batch=1 tables=4 rows=20 left_to_spark=0" in caplog.text
    drain("spark", "0")

    driver, by_spark = _tables(spark, tmp_path / "driver"), _tables(spark, tmp_path / "spark")
    assert driver == by_spark
    assert _tables(spark, tmp_path / "columns") == by_spark
    assert _tables(spark, tmp_path / "scanned") == by_spark
    assert _names(spark, tmp_path / "driver", "DELTAS") == [
        (1, "last of its transaction"),
        (2, "updated"),
        (5, "newer"),
        (6, "n6"),
        (7, "n7"),
    ]
    assert _names(spark, tmp_path / "driver", "RELOAD") == [(1, "updated"), (3, "n3"), (4, "n4")]
    assert _names(spark, tmp_path / "driver", "MOVED") == [
        (2, "updated in place"),
        (4, "a row between"),
        (8, "moved from 3"),
        (9, "moved from 1"),
    ]
    stored = spark.read.format("delta").load(str(tmp_path / "driver" / "ERP" / "DELTAS"))
    six = stored.filter("ID = 6").collect()[0].asDict()
    want = {k: v for k, v in _row(6, "I", 10).items() if not k.startswith("__")}
    for k in ("AT", "AT_MS"):  # Spark gives timestamps as naive datetimes (the session's UTC)
        want[k] = want[k].replace(tzinfo=None)
    assert {k: six[k] for k in want} == {**want, "SCORE": pytest.approx(3.0)}


# -- the read path's and the driver's choices, without Spark ----------------------------------


def test_a_batchs_rows_are_split_by_header_and_each_tables_values_lose_their_header():
    found = pa.table(
        {
            "__header": [b"\x00a", b"\x00a", b"\x00b", b"\x00b"],
            "topic": ["t", "t", "t", "t"],
            "partition": pa.array([0, 1, 0, 2], pa.int32()),
            "offset": pa.array([5, 6, 7, 8], pa.int64()),
            "key": [b"k1", None, b"k3", b"k4"],
            "value": [b"\x00a-one", b"\x00a-two", b"\x00b-three", b"\x00b-four"],
        }
    )
    raw = by_header(found.slice(1))  # a slice, as a run of tables' rows is
    assert sorted(raw) == [b"\x00a", b"\x00b"]
    assert raw[b"\x00a"].offsets.to_pylist() == [6]  # each header's rows are together
    assert raw[b"\x00b"].where(0) == "partition 0, offset 7"
    assert _after(raw[b"\x00b"].values, 2).to_pylist() == [b"-three", b"-four"]
    assert by_header(found.slice(0, 0)) == {}


def _lane(max_rows: int, lakehouse: str = "/lake", read_rows: int | None = None) -> Router:
    read = max_rows if read_rows is None else read_rows
    return Router(DeltaRsWrites(max_rows), lakehouse, read, "i")


def test_the_scan_decodes_only_the_topics_with_more_messages_than_the_driver_takes():
    lane = _lane(100)
    schema = _schema("X")
    expected = [
        Expected(bytes([i]), CatalogEntry("{}", "value", topic), schema)
        for i, topic in enumerate(("big", "small", "idle"))
    ]
    ranges = {("big", 0): (0, 80), ("big", 1): (10, 40), ("small", 0): (5, 105)}
    assert [e.entry.topic for e in lane.scanned(expected, ranges)] == ["big"]
    assert lane.scanned(expected, None) == expected  # ranges not known: all
    assert _lane(0).scanned(expected, ranges) == expected  # the driver's path off
    cloud = _lane(100, "s3a://bucket/lake")
    assert cloud.scanned(expected, ranges) == expected  # delta-rs does not reach s3a://
    azure = _lane(100, "abfss://lake@account.dfs.core.windows.net/lake")
    assert [e.entry.topic for e in azure.scanned(expected, ranges)] == ["big"]  # it reaches


def test_a_batch_is_read_into_the_driver_whole_only_when_all_it_holds_is_small():
    ranges = {("a", 0): (0, 60), ("a", 1): (10, 40), ("b", 0): (5, 15)}  # 100 messages
    assert _lane(100).reads_whole(ranges, {})
    assert not _lane(99).reads_whole(ranges, {})
    assert not _lane(100).reads_whole(ranges, {("a", 0): (0, 1)})  # held back rows read again
    assert not _lane(100).reads_whole(None, {})  # ranges not known
    assert not _lane(0).reads_whole(ranges, {})  # the driver's path off
    assert not _lane(100, "s3a://bucket/lake").reads_whole(ranges, {})  # delta-rs: not there
    assert _lane(100, "abfss://lake@account.dfs.core.windows.net/lake").reads_whole(ranges, {})
    # More messages than a table may have, in topics that each have few enough: read whole
    # as long as the batch has at most read_rows (LAKEHOUSE_DRIVER_READ_ROWS) messages.
    assert _lane(90, read_rows=100).reads_whole(ranges, {})  # topic a: 90, b: 10
    assert not _lane(89, read_rows=1000).reads_whole(ranges, {})  # topic a is a large table
    assert not _lane(90, read_rows=100).reads_whole(ranges, {("b", 0): (0, 1)})  # 101 in all
    assert not _lane(90, read_rows=0).reads_whole(ranges, {})  # whole-batch reads off


def test_the_driver_holds_at_most_max_rows_rows_of_small_tables_at_once():
    tables = [_Table(bytes([i]), "", None, (), None) for i in range(5)]  # type: ignore[arg-type]
    rows = {bytes([0]): 60, bytes([1]): 40, bytes([2]): 100, bytes([3]): 1, bytes([4]): 99}
    runs = [[t.header[0] for t in run] for run in _chunks(tables, rows, 100)]
    assert runs == [[0, 1], [2], [3, 4]]
    assert _chunks([], rows, 100) == []


def test_columns_the_writer_schema_lacks_are_null_even_where_an_avro_name_spells_them():
    payload = pa.table({"ORDER_DATE": [2, 1], "__change_type": ["U", "U"]})  # Avro names
    schema = pa.schema(
        [("ORDER DATE", pa.int64()), ("ORDER_DATE", pa.int64()), ("__change_type", pa.string())]
    )
    taken = _in_table_columns(payload, {"ORDER DATE": "ORDER_DATE"}, schema)
    assert taken.to_pydict() == {
        "ORDER DATE": [2, 1],
        "ORDER_DATE": [None, None],  # another version's column: not this schema's
        "__change_type": ["U", "U"],
    }
