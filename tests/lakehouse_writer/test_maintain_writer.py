"""Maintenance of tables the writer wrote: GDPR deletes leave no file, no row is lost.

Rows go through the real broker and ``lakehouse-writer run --once``; maintenance runs
between writer runs (never beside one: docs/OPERATIONS.md says why).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.tables.maintain import maintain_tables
from lakehouse_writer.tables.retention import MaintainSettings
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SECRET = "Erika Mustermann 7f3a"  # the GDPR-deleted customer's name


def _row(i: int, kind: str, t: int, name: str | None = None) -> dict:
    return {"ID": i, "NAME": name or f"n{i}", "__change_type": kind, "__change_time": T0 + t}


def _holders(table: Path, key: int) -> list[str]:
    """Every parquet file under the table (data of every version, Change Data Feed files,
    log checkpoints) holding the row: its key in an ``ID`` column, or the name anywhere."""
    found = []
    for file in sorted(table.rglob("*.parquet")):
        data = pq.read_table(file)
        if "ID" in data.column_names and key in data.column("ID").to_pylist():
            found.append(str(file.relative_to(table)))
        elif SECRET in str(data.to_pylist()):
            found.append(str(file.relative_to(table)))
    return found


@pytest.fixture
def writer(kafka_bootstrap, new_topic, tmp_path, monkeypatch):
    """(produce(rows), drain(), table path) of a keyed table written by the writer."""
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    argv = once_argv(tmp_path / "lake", tmp_path / "ckpt", topic, kafka_bootstrap)

    def produce(rows: list[dict]) -> None:
        produce_transaction(kafka_bootstrap, topic, schema, rows)

    def drain() -> None:
        assert main(argv) == 0, "the writer failed"

    return produce, drain, tmp_path / "lake" / "SHOP" / "ORDERS"


@pytest.mark.parametrize("small_merge_rows", ["0", "10000"], ids=["spark-merge", "delta-rs-merge"])
def test_a_gdpr_delete_leaves_no_file_holding_the_row_after_maintenance(
    spark, writer, tmp_path, monkeypatch, small_merge_rows
):
    # Spark's MERGE with deletion vectors then the purge's rewrite, or delta-rs's MERGE rewriting
    # files: either way the writer marks the batch (flow.gdpr_delete), and maintenance finds it.
    monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", small_merge_rows)
    produce, drain, table = writer
    produce([_row(i, "I", 1, SECRET if i == 3 else None) for i in range(1, 6)])
    drain()
    produce([_row(3, "U", 2, SECRET + " moved"), _row(4, "U", 2)])  # old and CDF images
    drain()
    produce([_row(3, "G", 3)])
    drain()
    rows = sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).collect())
    assert [r[0] for r in rows] == [1, 2, 4, 5]
    assert _holders(table, 3), "no file held the row before maintenance: the test proves nothing"

    settings = MaintainSettings(gdpr_completion_hours=0)  # the completion time has passed
    reports = maintain_tables(spark, str(tmp_path / "lake"), ["SHOP.ORDERS"], settings)
    [report] = [r for r in reports if r.table == "SHOP.ORDERS"]  # then its tombstones

    assert report.error is None, report.error
    assert report.plan is not None and report.plan.gdpr_purge_ms is not None
    assert report.plan.vacuum_hours == 0
    assert _holders(table, 3) == []
    after = sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).collect())
    assert after == rows


def test_a_maintenance_pass_between_two_writer_runs_keeps_every_row(spark, writer, tmp_path):
    produce, drain, table = writer
    for t in range(1, 7):  # six transactions: six batches' worth of small files
        produce([_row(10 * t + i, "I", t) for i in range(3)])
        drain()
    frame = spark.read.format("delta").load(str(table))
    before = sorted(tuple(r) for r in frame.select("ID", "NAME", "__change_type").collect())
    lake = str(tmp_path / "lake")

    reports = maintain_tables(spark, lake, None, MaintainSettings(compact_min_files=2))

    assert all(r.error is None for r in reports), [(r.table, r.error) for r in reports]
    [orders] = [r for r in reports if r.table == "SHOP.ORDERS"]
    assert orders.files_after < orders.files_before, orders
    frame = spark.read.format("delta").load(str(table))
    assert sorted(tuple(r) for r in frame.select("ID", "NAME", "__change_type").collect()) == before

    produce([_row(10, "U", 8, "renamed"), _row(11, "D", 8), _row(99, "I", 8)])
    drain()
    frame = spark.read.format("delta").load(str(table))
    after = {r.ID: r.NAME for r in frame.select("ID", "NAME").collect()}
    expected = {r[0]: r[1] for r in before if r[0] != 11} | {10: "renamed", 99: "n99"}
    assert after == expected


def test_a_gdpr_purge_that_fails_rejects_its_rows_with_the_reason_and_the_run_goes_on(
    spark, writer, tmp_path, monkeypatch
):
    monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", "0")  # Spark's MERGE, which skips files
    produce, drain, table = writer
    produce([_row(i, "I", 1) for i in range(1, 4)])
    drain()
    produce([_row(i, "I", 2) for i in (100, 101)])
    drain()
    # the file of keys 100-101 is lost: the MERGE of key 2 skips it, the purge cannot read it
    lost = [f for f in table.glob("*.parquet") if 100 in pq.read_table(f).column("ID").to_pylist()]
    assert len(lost) == 1, lost
    lost[0].unlink()
    produce([_row(2, "G", 3)])

    drain()  # ends 0: the table's batch failed, not the run

    rejected = spark.read.format("delta").load(str(tmp_path / "lake" / "_rejected")).collect()
    assert [r.table for r in rejected] == ["SHOP.ORDERS"]  # the G row, with why
    assert "GDPR purge failed" in rejected[0].error, rejected[0].error
    assert "does not exist" in rejected[0].error or "FileNotFound" in rejected[0].error
