"""BatchProcessor on micro-batches of Kafka-shaped rows: ``_commits`` held back until complete,
stopped tables that stay stopped, the system-topic tables, restarts and replays.

Each "restart" is a new BatchProcessor on the same lakehouse and writer instance, as a new
writer process would build; everything it knows comes from the lakehouse.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from lakehouse_writer.commit.state import StateStore
from lakehouse_writer.runtime.status import read_status
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream.job import BatchProcessor
from lakehouse_writer.tables.manager import jvm_delta_log
from producer_lib.runner.execution_log import ExecutionRecord
from producer_lib.runner.lineage import derive_lineage
from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema
from tests.support.writer import (
    T0,
    commit_message,
    kafka_rows,
    publish_schemas,
    row_messages,
    sample_schema,
    writer_env,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ORDERS = sample_schema("ORDERS")


def _customers() -> ValueSchema:
    schema = ValueSchema("CUSTOMERS", "SHOP")
    schema.add_field("CID", AvroLong(), nullable=False)
    schema.add_field("CNAME", AvroNVarchar(40))
    schema.add_primary_key("CID")
    return schema


def _orders_v2() -> ValueSchema:
    """ORDERS with AMOUNT turned from decimal into text: not a widening."""
    schema = ValueSchema("ORDERS", "SHOP", doc="orders of the shop")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(40))
    schema.add_field("REGION", AvroNVarchar(10))
    schema.add_field("AMOUNT", AvroNVarchar(20))
    schema.add_primary_key("ID")
    return schema


CUSTOMERS, ORDERS_V2 = _customers(), _orders_v2()


@pytest.fixture
def lake(spark, kafka_bootstrap, new_topic, tmp_path):
    """(new processor factory, lakehouse path, checkpoint path): one writer instance."""
    schemas = new_topic(suffix="_schemas")
    for topic, schema in (("orders", ORDERS), ("customers", CUSTOMERS), ("orders", ORDERS_V2)):
        publish_schemas(kafka_bootstrap, topic, schemas, schema)
    path, checkpoint = str(tmp_path / "lake"), str(tmp_path / "ckpt")
    settings = LakehouseSettings(
        **writer_env(
            path,
            checkpoint,
            kafka_bootstrap,
            LAKEHOUSE_SCHEMAS_TOPIC=schemas,
            LAKEHOUSE_TOPICS_REGEX="orders|customers|_commits|_execution_log|_lineage",
        )
    )

    def make(warm: bool = False, **more: object) -> BatchProcessor:
        return BatchProcessor(spark, settings.model_copy(update=more), "instance-1", warm)

    return make, path, checkpoint


def _read(spark, path, version=None):
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def _version(spark, path) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg({"version": "max"}).first()[0]


def _orders(*ids, t=1, kind="I"):
    return [{"ID": i, "NAME": f"n{i}", "__change_type": kind, "__change_time": T0 + t} for i in ids]


def _customer(cid, t=1):
    return {"CID": cid, "CNAME": f"c{cid}", "__change_type": "I", "__change_time": T0 + t}


@pytest.mark.slow
def test_commit_row_waits_for_all_its_rows_and_survives_restarts(spark, lake, monkeypatch):
    make, path, _ = lake
    p0 = row_messages("orders", ORDERS, _orders(1, 2), partition=0)
    p1 = row_messages("orders", ORDERS, _orders(3, 4), partition=1)
    c0 = row_messages("customers", CUSTOMERS, [_customer(7)])
    commit = commit_message(
        "_commits",
        0,
        T0 + 1,
        ends=[("orders", 0, 0, 1), ("orders", 1, 0, 1), ("customers", 0, 0, 0)],
        tables=[("orders", "SHOP.ORDERS", 4), ("customers", "SHOP.CUSTOMERS", 1)],
    )
    foreign = commit_message(
        "_commits", 1, T0 + 1, ends=[("elsewhere", 0, 0, 9)], tables=[("elsewhere", "X.Y", 10)]
    )
    garbage = ("_commits", 0, 2, b"k", b"not json")
    commits_path = f"{path}/_commits"

    make()(kafka_rows(spark, [*p0, commit, foreign, garbage]), 0)
    assert not _exists(spark, commits_path)  # the record came before most of its rows
    rejected = _read(spark, f"{path}/_rejected").collect()
    assert [(r.topic, r.offset) for r in rejected] == [("_commits", 2)]
    assert "not a commit record" in rejected[0].error

    restarted = make()  # the pending commit comes back from the lakehouse
    assert list(restarted.state.pending) == [commit[3].decode()]
    restarted(kafka_rows(spark, p1), 1)
    assert not _exists(spark, commits_path)  # customers still missing
    restarted(kafka_rows(spark, c0), 2)

    rows = _read(spark, commits_path).collect()
    assert [(r.commit_id, r.batch_id, r.unapplied_tables) for r in rows] == [
        (commit[3].decode(), 2, [])
    ]
    versions = rows[0].table_versions
    assert set(versions) == {"SHOP.ORDERS", "SHOP.CUSTOMERS"}
    at_commit = _read(spark, f"{path}/SHOP/ORDERS", versions["SHOP.ORDERS"])
    assert sorted(r.ID for r in at_commit.collect()) == [1, 2, 3, 4]
    customers = _read(spark, f"{path}/SHOP/CUSTOMERS", versions["SHOP.CUSTOMERS"]).collect()
    assert [r.CID for r in customers] == [7]

    # the checkpoint lost batch 2 (crash after it): the replay is skipped, nothing doubles
    orders_version = _version(spark, f"{path}/SHOP/ORDERS")
    make()(kafka_rows(spark, c0), 2)
    assert _read(spark, commits_path).count() == 1

    # a crash after `_commits` was written but before the state: the replay writes it once
    late = row_messages("orders", ORDERS, _orders(5, t=2), partition=0, first_offset=3)
    second = commit_message(
        "_commits", 3, T0 + 2, ends=[("orders", 0, 3, 3)], tables=[("orders", "SHOP.ORDERS", 1)]
    )
    monkeypatch.setattr(StateStore, "append", _crash)
    with pytest.raises(RuntimeError, match="crash"):
        make()(kafka_rows(spark, [*late, second]), 3)
    monkeypatch.undo()
    make()(kafka_rows(spark, [*late, second]), 3)
    ids = [r.commit_id for r in _read(spark, commits_path).collect()]
    assert sorted(ids) == sorted([commit[3].decode(), second[3].decode()])
    assert _version(spark, f"{path}/SHOP/ORDERS") == orders_version + 1  # batch 3 applied once


@pytest.mark.slow
def test_incompatible_schema_stops_only_that_table_also_after_a_restart(spark, lake, caplog):
    make, path, checkpoint = lake
    first = make()
    first(
        kafka_rows(
            spark,
            [
                *row_messages("orders", ORDERS, _orders(1)),
                *row_messages("customers", CUSTOMERS, [_customer(1)]),
            ],
        ),
        0,
    )
    bad = {"ID": 2, "AMOUNT": "12,50 EUR", "__change_type": "I", "__change_time": T0 + 2}
    with caplog.at_level(logging.ERROR, logger="lakehouse_writer"):
        first(
            kafka_rows(
                spark,
                [
                    *row_messages("orders", ORDERS_V2, [bad], first_offset=1),
                    *row_messages("orders", ORDERS, _orders(3, t=2), first_offset=2),
                    *row_messages("customers", CUSTOMERS, [_customer(2, t=2)], first_offset=1),
                ],
            ),
            1,
        )
    assert "table stopped table=SHOP.ORDERS" in caplog.text
    assert "incompatible column type" in caplog.text

    restarted = make()  # a new process must not resume the stopped table
    restarted(
        kafka_rows(
            spark,
            [
                *row_messages("orders", ORDERS, _orders(4, t=3), first_offset=3),
                *row_messages("customers", CUSTOMERS, [_customer(3, t=3)], first_offset=2),
            ],
        ),
        2,
    )

    assert [r.ID for r in _read(spark, f"{path}/SHOP/ORDERS").collect()] == [1]
    customers = sorted(r.CID for r in _read(spark, f"{path}/SHOP/CUSTOMERS").collect())
    assert customers == [1, 2, 3]
    rejected = {r.offset: r for r in _read(spark, f"{path}/_rejected").collect()}
    assert sorted(rejected) == [1, 2, 3]
    assert all(r.table == "SHOP.ORDERS" and r.topic == "orders" for r in rejected.values())
    assert "incompatible column type" in rejected[1].error and "AMOUNT" in rejected[1].error
    assert "table stopped" in rejected[3].error and "AMOUNT" in rejected[3].error
    status = read_status(checkpoint)
    assert status and "AMOUNT" in status["stopped_tables"]["SHOP.ORDERS"]


def test_execution_log_and_lineage_records_land_parsed(spark, lake):
    make, path, _ = lake
    record = ExecutionRecord(
        run_id="run-1",
        function_name="shop_flow",
        dataflow="ORDERS",
        partition="0",
        status="COMPLETED",
        load="delta",
        started_at="2024-05-01T10:00:00.000000+00:00",
        finished_at="2024-05-01T10:00:05.250000+00:00",
        rows={"SHOP.ORDERS": 3},
        delta_pointer={"since": "2024-05-01"},
        commit_id="c-1",
    )
    lineage = derive_lineage(
        "select o.ID, upper(o.NAME) as NAME from shop.orders o",
        "SHOP.ORDERS_CLEAN",
        output_columns=["ID", "NAME"],
    )
    document = json.dumps(lineage.to_json("c-1")).encode()
    started = replace(
        record,
        run_id="run-2",
        status="STARTED",
        finished_at=None,
        rows={},
        delta_pointer="2024-05-01",
        commit_id=None,
    )
    make()(
        kafka_rows(
            spark,
            [
                ("_execution_log", 0, 5, *record.encode()),
                ("_execution_log", 0, 6, *started.encode()),
                ("_lineage", 0, 9, b"SHOP.ORDERS_CLEAN", document),
            ],
        ),
        0,
    )

    log_table = _read(spark, f"{path}/_execution_log").withColumn(
        "started_us", F.unix_micros("started_at")
    )
    runs = {r.run_id: r for r in log_table.collect()}
    assert sorted(runs) == ["run-1", "run-2"]
    assert json.loads(runs["run-2"].delta_pointer) == "2024-05-01"  # JSON text, exactly
    assert runs["run-2"].finished_at is None and runs["run-2"].status == "STARTED"
    got = runs["run-1"]
    assert (got.key, got.run_id, got.status, got.load, got.partition, got.commit_id) == (
        "shop_flow|ORDERS|0",
        "run-1",
        "COMPLETED",
        "delta",
        "0",
        "c-1",
    )
    assert got.rows == {"SHOP.ORDERS": 3}
    assert json.loads(got.delta_pointer) == {"since": "2024-05-01"}
    assert got.started_us == datetime(2024, 5, 1, 10, 0, tzinfo=UTC).timestamp() * 1_000_000
    assert (got.finished_at - got.started_at).total_seconds() == 5.25
    assert (got.kafka_topic, got.kafka_partition, got.kafka_offset) == ("_execution_log", 0, 5)

    doc = _read(spark, f"{path}/_lineage").collect()
    assert len(doc) == 1
    assert (doc[0].target, doc[0].commit_id, doc[0].dialect) == (
        "SHOP.ORDERS_CLEAN",
        "c-1",
        "duckdb",
    )
    assert list(doc[0].sources) == list(lineage.sources)
    columns = {c.target: c for c in doc[0].columns}
    assert columns["ID"].kind == "copy" and columns["NAME"].kind == "expression"
    assert "UPPER" in columns["NAME"].expression.upper()
    assert doc[0].sql.startswith("select o.ID")


def _exists(spark, path) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def _crash(*args, **kwargs):
    raise RuntimeError("crash: the process died before the state was written")


def test_a_running_writer_builds_the_state_of_a_merged_table_between_batches(spark, lake):
    make, path, _ = lake
    orders = f"{path}/SHOP/ORDERS"

    def state_built() -> bool:
        return bool(
            jvm_delta_log(spark, orders).unsafeVolatileSnapshot().stateReconstructionTriggered()
        )

    draining = make()  # --once: no warm-up
    draining(kafka_rows(spark, row_messages("orders", ORDERS, _orders(1, 2))), 0)
    time.sleep(1)
    assert not state_built()  # else the test below would prove nothing
    running = make(warm=True, small_merge_rows=0)  # Spark's MERGEs (delta-rs's need no state)
    running(kafka_rows(spark, row_messages("orders", ORDERS, _orders(3, t=2), first_offset=2)), 1)
    deadline = time.monotonic() + 60
    while not state_built() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state_built()
    running(
        kafka_rows(
            spark,
            row_messages(
                "orders", ORDERS, _orders(1, t=3, kind="U") + _orders(4, t=3), first_offset=3
            ),
        ),
        2,
    )
    assert sorted(r.ID for r in _read(spark, orders).collect()) == [1, 2, 3, 4]
    running.close()
