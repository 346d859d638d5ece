"""The change stream of a Delta table (its Change Data Feed), read by delta-rs into DuckDB.

Real Delta tables made by Spark with the writer's table properties (change data feed and
deletion vectors on), changed over several commits.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from producer_lib.errors import SourceError
from producer_lib.sources import DuckDBReader
from producer_lib.sources.delta_changes import (
    ChangesExpiredError,
    latest_version,
    load_changes,
    net_images,
)

pytestmark = [pytest.mark.spark]

PROPS = "'delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'true'"


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory) -> Path:
    """Version 0 empty; 1 inserts 1..3; 2 updates 2; 3 deletes 3; 4 merges (update 1, add 4)."""
    path = tmp_path_factory.mktemp("delta_changes") / "orders"
    target = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {target} (id BIGINT, name STRING) USING delta TBLPROPERTIES ({PROPS})")
    spark.sql(f"INSERT INTO {target} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(f"UPDATE {target} SET name = 'b2' WHERE id = 2")
    spark.sql(f"DELETE FROM {target} WHERE id = 3")
    spark.sql(
        f"MERGE INTO {target} t USING (SELECT 1L AS id, 'a2' AS name UNION ALL "
        "SELECT 4L, 'd') s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    return path


@pytest.fixture
def table(history, tmp_path) -> Path:
    """A copy of the module's table (its log holds relative paths): each test changes its own."""
    path = tmp_path / "orders"
    shutil.copytree(history, path)
    return path


def _staged(reader: DuckDBReader, since: int, path: Path, **kw):
    async def go():
        async with reader:
            return await load_changes(reader, "orders_changes", path, since, table="orders", **kw)

    return asyncio.run(go())


@pytest.mark.slow
def test_changes_since_a_position_are_row_images_with_kind_version_and_time(table):
    reader = DuckDBReader(connection=duckdb.connect())
    before = datetime.now(UTC)
    changes = _staged(reader, 1, table)
    assert (changes.since, changes.until, changes.rows) == (1, 4, 6)
    rows = reader.connection.execute(
        "SELECT _commit_version, _change_type, id, name FROM orders_changes ORDER BY 1, 3, 2"
    ).fetchall()
    # the order of rows within one commit is not defined: compare sorted. Version 3 removed
    # a file with a deletion vector whole: its delete is id 3 (delta-rs alone says id 2).
    assert sorted(rows) == sorted(
        [
            (2, "update_preimage", 2, "b"),
            (2, "update_postimage", 2, "b2"),
            (3, "delete", 3, "c"),
            (4, "update_preimage", 1, "a"),
            (4, "update_postimage", 1, "a2"),
            (4, "insert", 4, "d"),
        ]
    )
    types = dict(
        reader.connection.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'orders_changes'"
        ).fetchall()
    )
    assert types["_commit_version"] == "BIGINT"
    assert types["_commit_timestamp"] == "TIMESTAMP WITH TIME ZONE"
    (stamp,) = reader.connection.execute(  # epoch ms: a TIMESTAMPTZ to Python needs pytz
        "SELECT epoch_ms(max(_commit_timestamp)) FROM orders_changes"
    ).fetchone()
    assert abs(stamp / 1000 - before.timestamp()) < 600


@pytest.mark.slow
def test_rows_counted_and_nothing_after_the_latest_version(table):
    reader = DuckDBReader(connection=duckdb.connect())
    assert _staged(reader, 0, table).rows == 3 + 2 + 1 + 3  # inserts, update, delete, merge
    nothing = _staged(reader, 4, table)
    assert (nothing.since, nothing.until, nothing.rows) == (4, 4, 0)
    columns = [r[0] for r in reader.connection.execute("DESCRIBE orders_changes").fetchall()]
    assert columns == ["id", "name", "_change_type", "_commit_version", "_commit_timestamp"]
    bounded = _staged(reader, 1, table, until=2)  # a fixed end: only version 2
    assert (bounded.until, bounded.rows) == (2, 2)


@pytest.mark.slow
def test_net_images_one_before_and_one_after_per_key(table, spark):
    spark.sql(f"UPDATE delta.`{table}` SET name = 'a3' WHERE id = 1")  # version 5
    reader = DuckDBReader(connection=duckdb.connect())
    _staged(reader, 1, table)

    async def net():
        await net_images(reader, "orders_changes", ["id"], "orders_net")

    asyncio.run(net())
    rows = reader.connection.execute(
        "SELECT id, _image, name FROM orders_net ORDER BY id, _image DESC"
    ).fetchall()
    assert rows == [
        (1, "before", "a"),  # as of version 1, after two updates: a -> a2 -> a3
        (1, "after", "a3"),
        (2, "before", "b"),
        (2, "after", "b2"),
        (3, "before", "c"),  # deleted: no after image
        (4, "after", "d"),  # inserted: no before image
    ]


@pytest.mark.slow
def test_a_position_older_than_the_retained_changes_says_run_an_initial_load(table, spark):
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"OPTIMIZE delta.`{table}`")
        spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS")  # the change data files go
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
    assert not any((table / "_change_data").glob("*.parquet"))
    reader = DuckDBReader(connection=duckdb.connect())
    with pytest.raises(ChangesExpiredError) as caught:
        _staged(reader, 1, table)
    message = str(caught.value)
    assert "orders" in message and "after version 1" in message
    assert "run an initial load" in message
    assert caught.value.context["version"] == 1


@pytest.mark.slow
def test_an_expired_log_entry_says_run_an_initial_load(table, spark):
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (5, 'e')")  # writes a checkpoint
    assert any((table / "_delta_log").glob("*.checkpoint.parquet"))
    for version in range(3):  # what log retention removes: entries before the checkpoint
        os.remove(table / "_delta_log" / f"{version:020d}.json")
    reader = DuckDBReader(connection=duckdb.connect())
    with pytest.raises(ChangesExpiredError, match="after version 1 are no longer retained"):
        _staged(reader, 1, table)
    assert _staged(reader, 5, table).rows == 1  # a retained position still reads


@pytest.mark.slow
def test_a_position_newer_than_the_table_is_an_error(table):
    reader = DuckDBReader(connection=duckdb.connect())
    assert latest_version(table) == 4
    with pytest.raises(ChangesExpiredError, match="is at version 4, its change position is 9"):
        _staged(reader, 9, table)


def test_no_delta_table_is_an_error_naming_it(tmp_path):
    reader = DuckDBReader(connection=duckdb.connect())
    with pytest.raises(SourceError, match="Cannot open Delta table orders"):
        _staged(reader, 0, tmp_path / "missing")


@pytest.mark.slow
def test_a_delete_that_only_grows_a_deletion_vector_is_read_right(table, spark):
    """A DELETE of some rows of a file (deletion vectors on) writes no change data file."""
    spark.sql(f"INSERT INTO delta.`{table}` SELECT id, concat('n', id) FROM range(10, 13)")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 11")  # version 6: 10 and 12 stay
    reader = DuckDBReader(connection=duckdb.connect())
    _staged(reader, 5, table)
    rows = reader.connection.execute(
        "SELECT _commit_version, _change_type, id, name FROM orders_changes"
    ).fetchall()
    assert rows == [(6, "delete", 11, "n11")]
