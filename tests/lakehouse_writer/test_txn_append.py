"""``txn.append``: idempotent appends committed through Delta's transaction (real Delta tables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse_writer.engines.spark import txn
from lakehouse_writer.runtime.frames import local_frame

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, name STRING"


def _commits(path: str) -> list[dict]:
    """Every commit of the table's log: its actions by kind."""
    out = []
    for file in sorted(Path(path, "_delta_log").glob("*.json")):
        actions: dict[str, list] = {}
        for line in file.read_text().splitlines():
            ((kind, value),) = json.loads(line).items()
            actions.setdefault(kind, []).append(value)
        out.append(actions)
    return out


def _rows(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


@pytest.mark.slow
def test_an_append_commits_its_rows_and_transaction_id_once(spark, tmp_path):
    path = str(tmp_path / "t")
    first = local_frame(spark, [(1, "a")], SCHEMA)
    txn.append(first, path, "app", 0)  # creates the table: Delta's own append
    second = local_frame(spark, [(2, "b"), (3, None)], SCHEMA)
    assert txn.append_in_transaction(second, path, "app", 1)  # the table's columns: Delta's txn
    txn.append(local_frame(spark, [(9, "replayed")], SCHEMA), path, "app", 1)  # a replay
    txn.append(local_frame(spark, [(9, "older")], SCHEMA), path, "app", 0)  # older: a replay
    txn.append(local_frame(spark, [(4, "d")], SCHEMA), path, "other", 0)  # another app id

    assert _rows(spark, path) == [(1, "a"), (2, "b"), (3, None), (4, "d")]
    commits = _commits(path)
    assert len(commits) == 3  # the two replays committed nothing
    assert commits[1]["txn"] == [
        {"appId": "app", "version": 1, "lastUpdated": commits[1]["txn"][0]["lastUpdated"]}
    ]
    # The same commit as Delta's own append writes (that of the first commit).
    info = [
        {k: c["commitInfo"][0][k] for k in ("operation", "operationParameters")} for c in commits
    ]
    assert (
        info
        == [{"operation": "WRITE", "operationParameters": {"mode": "Append", "partitionBy": "[]"}}]
        * 3
    )
    assert commits[1]["commitInfo"][0]["isBlindAppend"] is True
    assert sum(json.loads(a["stats"])["numRecords"] for a in commits[1]["add"]) == 2


@pytest.mark.slow
def test_delta_s_own_writer_sees_the_transaction_ids_it_committed(spark, tmp_path):
    path = str(tmp_path / "t")
    txn.append(local_frame(spark, [(1, "a")], SCHEMA), path, "app", 0)
    txn.append(local_frame(spark, [(2, "b")], SCHEMA), path, "app", 5)
    # A replay written through Delta's DataFrameWriter (as an older writer would): skipped.
    (
        local_frame(spark, [(9, "z")], SCHEMA)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", "app")
        .option("txnVersion", 5)
        .save(path)
    )
    assert _rows(spark, path) == [(1, "a"), (2, "b")]


@pytest.mark.slow
def test_a_new_column_goes_through_schema_merge_and_a_not_null_column_is_enforced(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, name STRING) USING delta")
    with pytest.raises(Exception, match="(?i)null"):
        txn.append(local_frame(spark, [(None, "x")], SCHEMA), path, "app", 0)
    assert _rows(spark, path) == []
    txn.append(local_frame(spark, [(1, "a")], SCHEMA), path, "app", 0)
    wider = local_frame(spark, [(2, "b", 7)], SCHEMA + ", extra INT")
    assert txn.append_in_transaction(wider, path, "app", 1) is None  # new column: Delta's writer
    txn.append(wider, path, "app", 1, merge_schema=True)
    assert _rows(spark, path) == [(1, "a", None), (2, "b", 7)]
    txn.append(
        local_frame(spark, [(3, "c", 8)], SCHEMA + ", extra INT"), path, "app", 1, merge_schema=True
    )  # a replay of the schema change: nothing
    assert len(_rows(spark, path)) == 2


def _data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).glob("*.parquet")}


@pytest.mark.slow
def test_a_failed_check_commits_nothing_and_writes_no_file(spark, tmp_path):
    path = str(tmp_path / "t")
    txn.append(local_frame(spark, [(1, "a")], SCHEMA), path, "app", 0)  # creates the table
    before, commits = _data_files(path), len(_commits(path))
    calls = []

    def refuse() -> bool:
        calls.append(spark.range(3).count())  # a Spark job of its own, as unique_keys runs
        return False

    more = local_frame(spark, [(2, "b"), (3, "c")], SCHEMA)
    assert txn.append(more, path, "app", 1, check=refuse) is False
    assert calls == [3]
    assert _rows(spark, path) == [(1, "a")]
    assert len(_commits(path)) == commits  # no commit, so version 1 of "app" is still free
    assert _data_files(path) == before
    assert txn.append(more, path, "app", 1, check=lambda: True) is True
    assert _rows(spark, path) == [(1, "a"), (2, "b"), (3, "c")]
    assert txn.append(more, path, "app", 1, check=lambda: True) is True  # a replay: skipped
    assert len(_rows(spark, path)) == 3


@pytest.mark.slow
def test_a_check_runs_first_where_delta_s_own_writer_appends(spark, tmp_path):
    path = str(tmp_path / "t")  # no table yet: Delta's writer creates it
    rows = local_frame(spark, [(1, "a")], SCHEMA)
    assert txn.append(rows, path, "app", 0, check=lambda: False) is False
    assert not Path(path, "_delta_log").exists()
    assert txn.append(rows, path, "app", 0, check=lambda: True) is True
    assert _rows(spark, path) == [(1, "a")]


def test_column_names_and_types_decide_the_path_not_nullability():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    a = StructType([StructField("id", LongType(), False), StructField("n", StringType())])
    b = StructType([StructField("id", LongType(), True), StructField("n", StringType())])
    swapped = StructType([StructField("n", StringType()), StructField("id", LongType())])
    assert txn.same_columns(a, b)
    assert not txn.same_columns(a, swapped)
    assert not txn.same_columns(a, StructType(a.fields[:1]))
