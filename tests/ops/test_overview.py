"""Table facts from the Delta log alone, on a table Spark wrote with deletion vectors.

Rows come from the file statistics less what the deletion vectors delete; the newest change
from the statistics of ``__change_time``. A full scan must agree.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from lakehouse_writer.ops.overview import TableReader

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_rows_and_the_newest_change_follow_deletes_by_deletion_vector(spark, tmp_path):
    lake = tmp_path / "lake"
    path = lake / "SHOP" / "ORDERS"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (ID BIGINT, __change_time TIMESTAMP) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(
        f"INSERT INTO delta.`{path}` SELECT id, timestamp_micros(1700000000000000 + id * 1000) "
        "FROM range(10)"
    )
    reader = TableReader(str(lake))
    first = reader.facts("SHOP.ORDERS")
    assert first is not None and first.rows == 10 and first.operation == "WRITE"
    assert first.newest_change is not None
    assert first.newest_change.timestamp() == pytest.approx(1_700_000_000.009)

    spark.sql(f"DELETE FROM delta.`{path}` WHERE ID IN (2, 5, 9)")
    assert DeltaTable(str(path)).deletion_vectors().read_all().num_rows >= 1  # no file rewritten
    after = reader.facts("SHOP.ORDERS")
    assert after is not None and after.version == first.version + 1
    assert after.rows == 7 == spark.read.format("delta").load(str(path)).count()
    assert after.operation == "DELETE"
    assert reader.facts("SHOP.ORDERS") is after  # the same version is not read again
    assert reader.facts("SHOP.MISSING") is None
