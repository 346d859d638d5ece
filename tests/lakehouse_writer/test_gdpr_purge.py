"""GDPR deletes through apply_batch: no current file keeps the row, a failed purge names why.

The cluster runs of the same rule are in ``tests/cluster/test_writer_on_cluster.py``; the
files of older versions leaving with maintenance in ``test_maintain_writer.py``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from delta.tables import DeltaTable

from lakehouse_writer.engines.spark.engine import apply_batch
from lakehouse_writer.engines.spark.gdpr import GdprPurgeError, files_with_deleted_rows
from lakehouse_writer.tables.manager import GDPR_DELETE_PROPERTY, TableManager
from tests.support.writer import rows_df, sample_schema, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(params=[False, True], ids=["plain", "clustered"])
def orders(request, spark, tmp_path):
    """(apply(rows, batch_id), table, clustering columns): keyed, clustered by its key or not."""
    schema = sample_schema()
    if request.param:
        schema.set_cluster_columns("ID")
    table = TableManager(spark, str(tmp_path / "lake")).ensure(schema)

    def apply(rows, batch_id):
        return apply_batch(rows_df(spark, schema, rows), batch_id, table, "w1")

    return apply, table, ["ID"] if request.param else []


def _current_files(spark, path: str) -> list[str]:
    return [
        unquote(f.removeprefix("file:")) for f in spark.read.format("delta").load(path).inputFiles()
    ]


def _ids_in_files(spark, path: str) -> list[int]:
    """The ``ID`` of every row physically in the current files (deletion vectors ignored)."""
    return sorted(r.ID for r in spark.read.parquet(*_current_files(spark, path)).collect())


def test_a_gdpr_delete_leaves_no_image_of_the_key_in_any_current_file(spark, orders):
    apply, table, clustered = orders
    apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1} for i in range(1, 5)], 0)
    # the old image of 2 stays in the first file behind a deletion vector; 3 is deleted so
    apply(
        [
            {"ID": 2, "NAME": "n2-moved", "__change_type": "U", "t": 2},
            {"ID": 3, "__change_type": "D", "t": 2},
            {"ID": 9, "NAME": "n9", "__change_type": "I", "t": 2},
        ],
        1,
    )
    assert _ids_in_files(spark, table.path).count(2) == 2, "no hidden image: proves nothing"
    before = DeltaTable.forPath(spark, table.path).history(1).collect()[0]["version"]

    result = apply([{"ID": 2, "__change_type": "G", "t": 3}], 2)

    assert result.gdpr_purged
    assert table_rows(spark, table.path) == [(1, "n1"), (4, "n4"), (9, "n9")]
    assert _ids_in_files(spark, table.path) == [1, 4, 9]  # no image of 2, nor the deleted 3
    assert files_with_deleted_rows(spark, table.path) == 0
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", before + 1)
        .load(table.path)
    )
    # the rewrite is no change for readers of the Change Data Feed: only the delete is
    assert [(r.ID, r._change_type) for r in changes.collect()] == [(2, "delete")]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table.path}`").collect()[0]
    assert detail["properties"][GDPR_DELETE_PROPERTY] == "2"
    assert detail["clusteringColumns"] == clustered  # the rewrite kept the layout


def test_a_purge_that_fails_fails_the_batch_of_its_table_naming_table_and_cause(spark, tmp_path):
    schema = sample_schema()
    table = TableManager(spark, str(tmp_path / "lake")).ensure(schema)

    def apply(rows, batch_id):
        return apply_batch(rows_df(spark, schema, rows), batch_id, table, "w1")

    apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1} for i in range(1, 4)], 0)
    apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 2} for i in (100, 101)], 1)
    # a file of keys 100-101 is lost: the MERGE of key 2 skips it, the rewrite cannot read it
    [lost] = [f for f in _current_files(spark, table.path) if 100 in _ids_of(spark, f)]
    Path(lost).unlink()

    with pytest.raises(GdprPurgeError) as caught:
        apply([{"ID": 2, "__change_type": "G", "t": 3}], 2)

    message = str(caught.value)
    assert "GDPR purge failed" in message and "SHOP.ORDERS" in message
    assert "FileNotFoundException" in message or "does not exist" in message, message
    assert (
        GDPR_DELETE_PROPERTY
        not in (spark.sql(f"DESCRIBE DETAIL delta.`{table.path}`").collect()[0]["properties"])
    )


def _ids_of(spark, file: str) -> list[int]:
    return [r.ID for r in spark.read.parquet(file).select("ID").collect()]
