"""The Spark lines: which line a pyspark is, its jars, and the calls that differ by line.

The pure tests run anywhere; the Spark ones run on whichever line is installed: in the main
venv on the default line, and by hand in another line's venv
(``$(devstack compat 3.5) -m pytest tests/lakehouse_writer/test_lines.py``). The whole suite
on the other lines is not part of ``make test`` yet: the core still calls some Spark 4.1 and
Delta 4.4 internals directly (docs/TESTING.md).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from lakehouse_writer.runtime import jars, lines
from lakehouse_writer.runtime.lines import LINES, UnsupportedSparkLine, line_of


@pytest.mark.parametrize(
    ("version", "line"), [("3.5.5", "3.5"), ("3.5.7", "3.5"), ("4.0.1", "4.0"), ("4.1.3", "4.1")]
)
def test_a_pyspark_version_is_of_its_line(version, line):
    assert line_of(version) is LINES[line]


@pytest.mark.parametrize("version", ["3.4.4", "4.2.1", "dev"])
def test_a_pyspark_of_no_supported_line_is_refused_by_name(version):
    with pytest.raises(UnsupportedSparkLine, match=f"pyspark {version} is of no Spark line"):
        line_of(version)


@pytest.mark.parametrize(
    ("line", "hadoop", "delta_jar", "scala"),
    [
        ("3.5", "3.3.4", "delta-spark_2.12", "2.12"),
        ("4.0", "3.4.1", "delta-spark_2.13", "2.13"),
        ("4.1", "3.4.2", "delta-spark_4.1_2.13", "2.13"),
    ],
)
def test_each_line_gets_its_own_connectors_and_the_hadoop_azure_of_its_hadoop(
    line, hadoop, delta_jar, scala
):
    found = jars.coordinates(LINES[line], hadoop)
    artifacts = {artifact: version for _, artifact, version in found}

    assert artifacts[delta_jar] == LINES[line].delta
    assert artifacts["hadoop-azure"] == hadoop
    assert f"spark-sql-kafka-0-10_{scala}" in artifacts and f"spark-avro_{scala}" in artifacts
    assert not [a for a in artifacts if a.endswith("_2.12" if scala == "2.13" else "_2.13")]


def test_the_hadoop_version_is_read_from_sparks_jars(tmp_path: Path):
    (tmp_path / "hadoop-client-api-3.4.1.jar").write_bytes(b"")

    assert lines.hadoop_version(LINES["4.1"], [tmp_path]) == "3.4.1"
    assert lines.hadoop_version(LINES["3.5"], []) == "3.3.4"  # no jar: the line's own


def test_an_unknown_hadoop_gets_hadoop_azure_at_its_version_with_known_dependencies():
    found = jars.hadoop_azure("3.4.3")

    assert found[0] == ("org.apache.hadoop", "hadoop-azure", "3.4.3")
    assert found[1:] == jars.hadoop_azure("3.4.2")[1:]


@pytest.mark.parametrize(
    ("line", "old", "new", "widens"),
    [
        ("3.5", "tinyint", "int", True),
        ("3.5", "int", "bigint", False),  # Delta 3.2's preview feature stops at int
        ("3.5", "float", "double", False),
        ("3.5", "decimal(10,2)", "decimal(12,2)", False),
        ("4.0", "int", "bigint", True),
        ("4.1", "decimal(10,2)", "decimal(12,2)", True),
        ("4.1", "int", "decimal(12,0)", True),
        ("4.1", "bigint", "int", False),
    ],
)
def test_each_line_widens_what_its_delta_widens(line, old, new, widens):
    assert lines.widens(old, new, LINES[line]) is widens


# -- on the running line -----------------------------------------------------------------


@pytest.mark.spark
def test_arrow_goes_to_spark_and_back_on_this_line(spark):
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ["a", None],
            "at": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None], pa.timestamp("us", "UTC")
            ),
            "amount": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(10, 2)),
            "tags": pa.array([[("k", "v")], None], pa.map_(pa.string(), pa.string())),
        }
    )

    df = lines.dataframe_from_arrow(spark, table)
    back = lines.to_arrow(df.orderBy("id"))

    assert back.column("id").to_pylist() == [1, 2]
    assert back.column("amount").to_pylist() == [decimal.Decimal("1.50"), None]
    assert back.column("tags").to_pylist() == [[("k", "v")], None]
    assert lines.to_arrow(df.limit(0)).schema == back.schema  # no rows: still the schema
    ddl = lines.struct_from_ddl("id BIGINT, name STRING")
    assert lines.dataframe_from_arrow(spark, table.select(["id", "name"]), ddl).count() == 2


@pytest.mark.spark
def test_an_append_committed_through_deltas_transaction_on_this_line(spark, tmp_path):
    """What the writer's append does (engines/spark/txn.py), through lines' calls."""
    path = str(tmp_path / "t")
    spark.range(2).write.format("delta").save(path)
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    transaction = delta_log.startTransaction()
    lines.buffer_add(transaction.readTxn(), "app")
    files = transaction.writeFiles(spark.range(2, 5)._jdf)
    set_txn = jvm.org.apache.spark.sql.delta.actions.SetTransaction(
        "app", 7, jvm.scala.Some(jvm.java.lang.Long.valueOf(1))
    )
    operation = lines.write_operation(spark, transaction.snapshot().metadata().partitionColumns())

    version = transaction.commit(lines.seq_appended(spark, files, set_txn), operation)

    snapshot = lines.latest_snapshot(spark, delta_log)
    assert version == snapshot.version() == 1
    assert spark.read.format("delta").load(path).count() == 5
    assert delta_log.startTransaction().txnVersion("app") == 7
    added = [a.path() for a in lines.seq_as_java(spark, files)]
    assert len(added) >= 1 and all(p.endswith(".parquet") for p in added)
    lines.checkpoint_and_clean_up(spark, delta_log, snapshot)
    checkpoint = json.loads((tmp_path / "t" / "_delta_log" / "_last_checkpoint").read_text())
    assert checkpoint["version"] == 1


@pytest.mark.spark
def test_a_plan_runs_in_a_cloned_session_and_job_properties_reach_a_thread(spark):
    clone = spark.newSession()
    df = spark.range(3)

    moved = lines.dataset_of_rows(clone, df._jdf.queryExecution().logical())

    assert moved.count() == 3
    spark.sparkContext.setLocalProperty("lakehouse.test", "inherited")
    seen: list[str | None] = []
    probe = lines.inheritable(
        spark, lambda: seen.append(spark.sparkContext.getLocalProperty("lakehouse.test"))
    )
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    spark.sparkContext.setLocalProperty("lakehouse.test", None)
    assert seen == ["inherited"]
