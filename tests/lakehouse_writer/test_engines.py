"""The two engines leave the same table, and a replay on either changes nothing.

Each test applies the same batches to two tables through the router
(:mod:`lakehouse_writer.route.router`), one on the Spark engine and one given to the delta-rs
engine (which hands what it declines to Spark), and compares what a reader sees: the rows, and
the Change Data Feed. The Delta log's ``engineInfo`` tells which engine wrote each commit.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.tables.manager import TableManager
from tests.support.writer import rows_df, sample_schema

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COLUMNS = ("ID", "NAME", "REGION", "AMOUNT", "__change_type")

FIRST = [{"ID": i, "NAME": f"n{i}", "REGION": "A", "__change_type": "I", "t": 1} for i in range(8)]
CHANGES = [
    {
        "ID": 1,
        "NAME": "n1-new",
        "REGION": "B",
        "AMOUNT": Decimal("1.50"),
        "__change_type": "U",
        "t": 2,
    },
    {"ID": 1, "NAME": "n1-newer", "REGION": "B", "__change_type": "U", "t": 3},
    {"ID": 2, "NAME": "n2", "__change_type": "D", "t": 2},
    {"ID": 3, "NAME": "stale", "__change_type": "U", "t": 0},  # older than stored: ignored
    {"ID": 4, "NAME": "n4-kept", "__change_type": "P", "t": 2},  # archive: payload kept
    {"ID": 20, "NAME": "n20", "REGION": "C", "__change_type": "A", "t": 2},
]


def _engines(path: str) -> list[str]:
    """The ``engineInfo`` of each commit after the table's creation, oldest first."""
    engines = []
    for log in sorted((Path(path) / "_delta_log").glob("*.json"))[1:]:
        for line in log.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None:
                engines.append(str(info.get("engineInfo", "")))
    return engines


def _seen(spark, path: str) -> tuple[list[tuple], list[tuple]]:
    from pyspark.sql import functions as F

    rows = spark.read.format("delta").load(path).select(*COLUMNS).collect()
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
        .select(*COLUMNS, "_change_type", "_commit_version")
        .withColumn("AMOUNT", F.col("AMOUNT").cast("string"))
        .collect()
    )
    return sorted(map(tuple, rows)), sorted(tuple(r[:-1]) for r in changes)


@pytest.fixture
def twins(spark, tmp_path):
    """Two empty tables of one schema: apply(rows, batch, writes) applies to the second.

    With ``writes`` (delta-rs's) the router gives the table to the delta-rs engine, else to
    Spark's.
    """
    schema = sample_schema()
    spark_table = TableManager(spark, str(tmp_path / "by_spark")).ensure(schema)
    delta_rs_table = TableManager(spark, str(tmp_path / "by_delta_rs")).ensure(schema)

    def apply(rows, batch_id, writes=None, table=delta_rs_table):
        router = Router(writes or DeltaRsWrites(0), str(tmp_path), 0, "w1")
        data = TableRows(table, rows_df(spark, schema, rows))
        engine = router.engine_for(data, len(rows)) if writes is not None else "spark"
        return router.apply(data, batch_id, (), spark, engine)

    return apply, spark_table, delta_rs_table


def test_the_delta_rs_engine_leaves_what_spark_leaves(spark, twins):
    apply, spark_table, delta_rs_table = twins
    writes = DeltaRsWrites()
    for batch_id, rows in enumerate([FIRST, CHANGES]):
        apply(rows, batch_id, table=spark_table)
        result = apply(rows, batch_id, writes=writes)
        assert result.engine == "delta-rs"
    assert _seen(spark, delta_rs_table.path) == _seen(spark, spark_table.path)
    rows, _ = _seen(spark, delta_rs_table.path)
    assert ("1", "n1-newer") == (str(rows[1][0]), rows[1][1])
    assert all(r[0] != 2 for r in rows), "the deleted key is gone"
    assert [e.split(":")[0] for e in _engines(delta_rs_table.path)][-1].startswith("delta-rs")
    assert result.version == 2


def test_a_first_batch_deleting_a_key_never_stored_stays_on_delta_rs(spark, twins):
    """An empty table, a batch that inserts one key and deletes another it never held:
    delta-rs writes it (its MERGE of such a batch into a table without files failed a
    NOT NULL check on a row it made up) and leaves what Spark leaves."""
    apply, spark_table, delta_rs_table = twins
    rows = [
        {"ID": 1, "NAME": "n1", "REGION": "A", "__change_type": "I", "t": 1},
        {"ID": 2, "NAME": "n2", "__change_type": "D", "t": 1},
    ]
    apply(rows, 0, table=spark_table)
    assert apply(rows, 0, writes=DeltaRsWrites()).engine == "delta-rs"
    assert _seen(spark, delta_rs_table.path) == _seen(spark, spark_table.path)
    assert [r[:2] for r in _seen(spark, delta_rs_table.path)[0]] == [(1, "n1")]
    assert _engines(delta_rs_table.path)[-1].startswith("delta-rs")


def test_a_replayed_batch_changes_nothing_whichever_engine_wrote_it(spark, twins):
    apply, _, table = twins
    writes = DeltaRsWrites()
    apply(FIRST, 0, writes=writes)
    apply(CHANGES, 1, writes=writes)
    before = _seen(spark, table.path)
    commits = len(_engines(table.path))
    assert apply(CHANGES, 1, writes=writes).version == 2  # delta-rs sees its own txn version
    assert apply(CHANGES, 1).version == 2  # and Spark sees it too
    assert _seen(spark, table.path) == before
    assert len(_engines(table.path)) == commits


def test_tables_delta_rs_cannot_write_and_large_batches_go_to_spark(spark, twins):
    apply, _, table = twins
    apply(FIRST, 0, writes=DeltaRsWrites(max_rows=3))  # 8 rows: more than it takes
    assert not any(e.startswith("delta-rs") for e in _engines(table.path))
    spark.sql(
        f"ALTER TABLE delta.`{table.path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    writes = DeltaRsWrites()
    apply(CHANGES, 1, writes=writes)
    assert not any(e.startswith("delta-rs") for e in _engines(table.path))
    rows, _ = _seen(spark, table.path)
    assert len(rows) == 8 and ("n1-newer" in {r[1] for r in rows})
    assert not writes.takes(table, 1), "the table is Spark's from then on"


@pytest.mark.parametrize("repeat", [False, True], ids=["appended", "a key repeats"])
def test_a_reload_after_delta_rs_merges_deletes_what_they_wrote(spark, twins, repeat):
    # The table was created by this writer: had its version been read from Spark's cached
    # snapshot (version 0, blind to delta-rs's commits), it would have passed for empty and
    # the reload would have kept the old rows.
    apply, _, table = twins
    writes = DeltaRsWrites()
    apply(FIRST, 0, writes=writes)
    reload = [
        {"ID": 0, "__change_type": "T", "t": 5},
        {"ID": 100, "NAME": "old", "__change_type": "R", "t": 5},
        {"ID": 100, "NAME": "new", "__change_type": "R", "t": 5},
    ]
    result = apply(reload if repeat else reload[:1] + reload[2:], 1, writes=writes)
    rows, _ = _seen(spark, table.path)
    assert [(r[0], r[1]) for r in rows] == [(100, "new")]
    assert result.version == 3  # delta-rs's merge, the TRUNCATE's delete, the reload
    assert result.engine == "delta-rs" and result.fast_path  # appended (the last per key)
    assert _engines(table.path)[-1].startswith("delta-rs")
