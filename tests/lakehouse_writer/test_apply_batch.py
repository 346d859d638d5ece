"""apply_batch on static DataFrames of decoded rows: row types, ordering, truncates, replays."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from lakehouse_writer.engines.spark.engine import apply_batch
from lakehouse_writer.tables.manager import TableManager
from tests.support.writer import rows_df, sample_schema, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def orders(spark, tmp_path):
    schema = sample_schema()
    table = TableManager(spark, str(tmp_path / "lake")).ensure(schema)

    def apply(rows, batch_id, instance="w1", applied=()):
        return apply_batch(rows_df(spark, schema, rows), batch_id, table, instance, applied)

    return apply, table


def _rejected(result):
    return sorted((r.offset, r.error) for frame in result.rejected for r in frame.collect())


def test_upserts_keep_the_latest_row_and_never_overwrite_newer_rows(spark, orders):
    apply, table = orders
    apply(
        [
            {"ID": 1, "NAME": "a", "__change_type": "I", "t": 10},
            {"ID": 1, "NAME": "a2", "__change_type": "U", "t": 10},  # same tx, later offset wins
            {"ID": 2, "NAME": "b", "__change_type": "A", "t": 10},
        ],
        0,
    )
    apply(
        [
            {"ID": 1, "NAME": "stale", "__change_type": "U", "t": 5},  # older than stored: ignored
            {"ID": 2, "NAME": "b2", "__change_type": "U", "t": 11},
            {"ID": 3, "NAME": "c", "__change_type": "I", "t": 11},
            {"ID": 3, "NAME": "c", "__change_type": "I", "t": 11},  # duplicate: MERGE must not fail
        ],
        1,
    )
    assert table_rows(spark, table.path) == [(1, "a2"), (2, "b2"), (3, "c")]


def test_deletes_archive_and_before_images_that_move_a_key(spark, orders):
    apply, table = orders
    apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1} for i in range(1, 7)], 0)
    result = apply(
        [
            {"ID": 1, "NAME": "n1", "__change_type": "D", "t": 2},
            {"ID": 2, "__change_type": "X", "t": 2},
            {"ID": 3, "NAME": "x", "__change_type": "P", "t": 2},  # payload kept, marked P
            {"ID": 4, "NAME": "n4", "__change_type": "B", "t": 2, "__source_rowid": "r4"},
            {"ID": 40, "NAME": "moved", "__change_type": "U", "t": 2, "__source_rowid": "r4"},
            {"ID": 5, "NAME": "n5", "__change_type": "B", "t": 2},  # pair: next offset, same key
            {"ID": 5, "NAME": "n5b", "__change_type": "U", "t": 2},
            {"ID": 6, "__change_type": "D", "t": 0},  # older than the stored row: ignored
        ],
        1,
    )
    assert _rejected(result) == []
    got = table_rows(spark, table.path, ("ID", "NAME", "__change_type"))
    assert got == [(3, "n3", "P"), (5, "n5b", "U"), (6, "n6", "I"), (40, "moved", "U")]


def test_truncate_in_a_batch_drops_older_rows_and_keeps_its_own_transaction(spark, orders):
    apply, table = orders
    apply(
        [
            {"ID": 1, "REGION": "A", "__change_type": "I", "t": 1},
            {"ID": 2, "REGION": "B", "__change_type": "I", "t": 1},
        ],
        0,
    )
    apply(
        [
            {"ID": 3, "REGION": "A", "__change_type": "I", "t": 2},  # tx1 of this batch
            {"ID": 4, "REGION": "B", "__change_type": "I", "t": 2},
            {"ID": 9, "__change_type": "T", "t": 3, "__truncate": {"REGION": "A"}},  # tx2
            {"ID": 5, "REGION": "A", "__change_type": "R", "t": 3},
            {"ID": 6, "REGION": "A", "__change_type": "I", "t": 4, "partition": 1},  # tx3
        ],
        1,
    )
    assert table_rows(spark, table.path, ("ID", "REGION")) == [
        (2, "B"),
        (4, "B"),
        (5, "A"),
        (6, "A"),
    ]


def test_truncate_scope_with_null_value_and_unknown_column(spark, orders):
    apply, table = orders
    apply(
        [
            {"ID": 1, "REGION": None, "__change_type": "I", "t": 1},
            {"ID": 2, "REGION": "B", "__change_type": "I", "t": 1},
        ],
        0,
    )
    result = apply(
        [
            {"ID": 0, "__change_type": "T", "t": 2, "__truncate": {"REGION": None}},
            {"ID": 0, "__change_type": "T", "t": 3, "__truncate": {"NOPE": "x"}},
        ],
        1,
    )
    assert table_rows(spark, table.path, ("ID", "REGION")) == [(2, "B")]
    assert [e for _, e in _rejected(result)] == ["TRUNCATE scope names unknown columns: NOPE"]


def test_replace_after_unscoped_truncate_appends_into_the_empty_table(spark, orders):
    apply, table = orders
    apply([{"ID": i, "NAME": "old", "__change_type": "I", "t": 1} for i in range(5)], 0)
    reload = (
        [{"ID": 0, "__change_type": "T", "t": 2}]
        + [{"ID": i, "NAME": "new", "__change_type": "R", "t": 2} for i in range(3)]
        + [{"ID": 2, "NAME": "newer", "__change_type": "R", "t": 2}]
    )
    result = apply(reload, 1)
    assert result.fast_path
    assert table_rows(spark, table.path) == [(0, "new"), (1, "new"), (2, "newer")]
    # ID 2 repeats: the files written while that was checked were deleted, not left behind
    assert _files_on_disk(table.path) == _files_ever_added(table.path)


def _files_on_disk(path: str) -> set[str]:
    return {
        p.relative_to(path).as_posix()
        for p in Path(path).rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def _files_ever_added(path: str) -> set[str]:
    added = set()
    for log in Path(path, "_delta_log").glob("*.json"):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(unquote(action["add"]["path"]))
    return added


def test_replaying_a_batch_changes_nothing(spark, orders):
    apply, table = orders
    batch = [
        {"ID": 1, "NAME": "a", "__change_type": "I", "t": 1},
        {"ID": 0, "__change_type": "T", "t": 2, "__truncate": {"REGION": "Z"}},
    ]
    first = apply(batch, 0)
    apply([{"ID": 1, "NAME": "b", "__change_type": "U", "t": 3}], 1)
    replay = apply(batch, 0)  # batch 0 again, after batch 1: must not write
    assert replay.version == first.version + 1
    assert table_rows(spark, table.path) == [(1, "b")]
    other = apply([{"ID": 2, "NAME": "c", "__change_type": "I", "t": 4}], 0, instance="w2")
    assert other.version == replay.version + 1  # a new checkpoint is no replay
    # the txn confs were cleared: an unrelated MERGE afterwards is applied
    apply([{"ID": 3, "NAME": "d", "__change_type": "I", "t": 5}], 2)
    assert table_rows(spark, table.path) == [(1, "b"), (2, "c"), (3, "d")]


def test_gdpr_delete_leaves_no_data_file_with_the_row(spark, orders):
    apply, table = orders
    apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1} for i in range(4)], 0)
    result = apply([{"ID": 2, "__change_type": "G", "t": 2}], 1)
    assert result.gdpr_purged
    assert table_rows(spark, table.path) == [(0, "n0"), (1, "n1"), (3, "n3")]
    files = spark.read.format("delta").load(table.path).inputFiles()
    raw = spark.read.parquet(*files).count()  # ignores deletion vectors
    assert raw == 3


def test_append_only_table_appends_truncates_and_rejects_deletes(spark, tmp_path):
    schema = sample_schema(name="LOG", keyed=False)
    table = TableManager(spark, str(tmp_path / "lake")).ensure(schema)
    apply_batch(
        rows_df(
            spark,
            schema,
            [
                {"ID": 1, "__change_type": "I", "t": 1},
                {"ID": 1, "__change_type": "I", "t": 1},
            ],
        ),
        0,
        table,
        "w",
    )
    result = apply_batch(
        rows_df(
            spark,
            schema,
            [
                {"ID": 0, "__change_type": "T", "t": 2},
                {"ID": 2, "__change_type": "R", "t": 2},
                {"ID": 2, "__change_type": "D", "t": 2},
                {"ID": 2, "__change_type": "Q", "t": 2},
            ],
        ),
        1,
        table,
        "w",
    )
    assert table.append_only
    assert table_rows(spark, table.path, ("ID",)) == [(2,)]
    errors = sorted(_rejected(result))
    assert errors[0][0] == 2 and "append-only" in errors[0][1]
    assert errors[1] == (3, "unknown __change_type Q")


def test_late_rows_of_older_transactions_die_by_an_applied_truncate(spark, orders):
    apply, table = orders
    first = apply(
        [
            {"ID": 0, "__change_type": "T", "t": 5},
            {"ID": 1, "NAME": "reload", "__change_type": "R", "t": 5},
        ],
        0,
    )
    apply(
        [
            {"ID": 2, "NAME": "late, older than the truncate", "__change_type": "I", "t": 4},
            {"ID": 3, "NAME": "newer", "__change_type": "I", "t": 6},
        ],
        1,
        applied=first.truncates,
    )
    assert table_rows(spark, table.path) == [(1, "reload"), (3, "newer")]


def test_unique_keys_sees_a_repeat_of_a_two_column_key_and_of_a_null_key(spark):
    from lakehouse_writer.engines.spark.engine import no_repeated_keys as unique_keys

    df = spark.createDataFrame([(1, "a"), (1, "b"), (2, "a"), (2, None)], "K1 LONG, K2 STRING")
    assert unique_keys(df, ("K1", "K2"))
    assert not unique_keys(df.union(spark.createDataFrame([(1, "b")], df.schema)), ("K1", "K2"))
    assert not unique_keys(df.union(spark.createDataFrame([(2, None)], df.schema)), ("K1", "K2"))
