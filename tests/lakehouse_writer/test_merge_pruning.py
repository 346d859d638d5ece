"""A MERGE of a narrow key range touches few files of a table clustered by its key.

The writer's MERGE carries a target-only condition on the batch's range of the first key
column (:func:`lakehouse_writer.rules.merge.key_range_condition`); Delta skips the data files whose
statistics lie outside it. Clustering by the key (then ``OPTIMIZE``) gives files of narrow,
disjoint key ranges, so few files are read and marked; files of scattered keys (as Kafka's
partitioning by key hash writes them) all hold the range: every file is read, and most are marked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lakehouse_writer.engines.spark.engine import apply_batch
from lakehouse_writer.engines.spark.engine import upserts as conform
from lakehouse_writer.read.summary import summarize_rows
from lakehouse_writer.tables.manager import TableInfo, TableManager
from tests.support.writer import rows_df, sample_schema, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 4_000
FILES = 8
MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"


def _table(spark, lake: str, name: str, clustered: bool) -> TableInfo:
    from pyspark.sql import functions as F

    schema = sample_schema(name)
    if clustered:
        schema.set_cluster_columns("ID")
    table = TableManager(spark, lake).ensure(schema)
    first = [{"ID": i, "NAME": f"n{i}", "REGION": "A", "__change_type": "I"} for i in range(ROWS)]
    rows = conform(rows_df(spark, schema, first), table)
    rows.repartition(FILES, F.xxhash64("ID")).write.format("delta").mode("append").save(table.path)
    if clustered:
        old = spark.conf.get(MAX_FILE_SIZE, None)
        spark.conf.set(MAX_FILE_SIZE, "16384")  # several files from a small table
        try:
            spark.sql(f"OPTIMIZE delta.`{table.path}`")
        finally:
            spark.conf.unset(MAX_FILE_SIZE) if old is None else spark.conf.set(MAX_FILE_SIZE, old)
    return table


def _files(spark, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).detail().collect()[0]["numFiles"])


def _merge(spark, table: TableInfo, rows, batch_id: int, ranged: bool = True) -> int:
    """Apply ``rows`` as the writer does; the data files the MERGE marked or rewrote."""
    from delta.tables import DeltaTable

    df = rows_df(spark, sample_schema(table.ref.name), rows)
    summary = summarize_rows(df, table)
    if not ranged:
        summary = dataclasses.replace(summary, key_range=None)
    apply_batch(df, batch_id, table, "w1", summary=summary)
    commit = DeltaTable.forPath(spark, table.path).history(1).collect()[0]
    assert commit["operation"] == "MERGE"
    metrics = commit["operationMetrics"]
    return int(metrics["numTargetDeletionVectorsAdded"]) + int(metrics["numTargetFilesRemoved"])


def _recent(t: int, first: int) -> list[dict]:
    """Updates of ten keys from ``first`` on and two new keys: a narrow range at the end."""
    updates = [
        {"ID": i, "NAME": f"changed{t}", "__change_type": "U", "t": t}
        for i in range(first, first + 10)
    ]
    return updates + [
        {"ID": ROWS + t * 10 + i, "NAME": "new", "__change_type": "I", "t": t} for i in range(2)
    ]


def test_a_narrow_merge_touches_one_clustered_file_and_most_scattered_ones(spark, tmp_path):
    lake = str(tmp_path / "lake")
    plain, clustered = _table(spark, lake, "PLAIN", False), _table(spark, lake, "CLUSTERED", True)
    assert _files(spark, plain.path) == FILES
    assert _files(spark, clustered.path) >= 4  # clustered into files of disjoint key ranges

    batch = _recent(1, ROWS - 20)
    scattered = _merge(spark, plain, batch, 1)  # the ten keys lie in most of its files
    assert scattered >= FILES // 2
    assert _merge(spark, clustered, batch, 1) == 1

    expected = [(i, f"n{i}") for i in range(ROWS - 20)]
    expected += [(i, "changed1") for i in range(ROWS - 20, ROWS - 10)]
    expected += [(i, f"n{i}") for i in range(ROWS - 10, ROWS)] + [
        (ROWS + 10, "new"),
        (ROWS + 11, "new"),
    ]
    assert table_rows(spark, plain.path) == table_rows(spark, clustered.path) == sorted(expected)


def _first_file(spark, path: str) -> tuple[str, int]:
    """The data file holding the lowest keys, and its highest key."""
    from pyspark.sql import functions as F

    rows = spark.read.format("delta").load(path).select("ID", "_metadata.file_path")
    by_file = rows.groupBy("file_path").agg(F.max("ID").alias("hi")).orderBy("hi").collect()
    return by_file[0]["file_path"], by_file[0]["hi"]


def test_the_merge_reads_no_file_outside_the_batch_key_range(spark, tmp_path):
    """The range condition, not the layout alone, keeps the MERGE off the other files.

    The file of the lowest keys is removed from disk: the writer's MERGE of a batch of high
    keys still succeeds (it never opens that file); the same MERGE without the range
    condition reads every file, and fails on the missing one.
    """
    from urllib.parse import urlparse

    table = _table(spark, str(tmp_path / "lake"), "CLUSTERED", True)
    gone, highest = _first_file(spark, table.path)
    assert highest < ROWS - 40
    Path(urlparse(gone).path).unlink()

    with pytest.raises(Exception, match="FileNotFound|does not exist"):
        _merge(spark, table, _recent(1, ROWS - 20), 1, ranged=False)
    assert _merge(spark, table, _recent(2, ROWS - 40), 2) == 1
    recent = f"ID >= {ROWS - 40} AND NAME LIKE 'changed%'"  # skips the missing file
    changed = spark.read.format("delta").load(table.path).filter(recent)
    assert sorted((r.ID, r.NAME) for r in changed.collect()) == [
        (i, "changed2") for i in range(ROWS - 40, ROWS - 30)
    ]
