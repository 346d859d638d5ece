"""A delete outlives the older rows of its key that arrive after it, on either engine.

Batches go through the router (:mod:`lakehouse_writer.route.router`) to a Delta table, on
Spark's engine and on delta-rs's, as the writer applies them: a key deleted in one batch is
not brought back by an older upsert or archive of a later batch — from another producer, or a
delete that arrived before the insert it deletes — while a row of the delete's time or newer
is applied. The tombstones are a Delta table of their own, written once per batch (a replay
writes nothing), and ``maintain`` drops those past their retention.
"""

from __future__ import annotations

import random
import time

import pytest

from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.tables.maintain import maintain_tables
from lakehouse_writer.tables.manager import TableManager
from lakehouse_writer.tables.retention import MaintainSettings
from tests.support.writer import T0, rows_df, sample_schema, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

S = 1_000_000  # µs: the rows' ``t`` is µs after T0

FIRST = [{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1 * S} for i in range(4)]
DELETES = [
    {"ID": 1, "NAME": "n1", "__change_type": "D", "t": 5 * S},
    # An UPDATE that moves key 3 to 30: its BEFORE image deletes key 3.
    {"ID": 3, "NAME": "n3", "__change_type": "B", "t": 4 * S, "__source_rowid": "r3"},
    {"ID": 30, "NAME": "n30", "__change_type": "U", "t": 4 * S, "__source_rowid": "r3"},
]
EARLY = [{"ID": 9, "NAME": "n9", "__change_type": "D", "t": 5 * S}]  # before its insert
LATE = [  # another producer's older rows, applied after the deletes
    {"ID": 1, "NAME": "late-update", "__change_type": "U", "t": 4 * S},
    {"ID": 1, "NAME": "late-archive", "__change_type": "P", "t": 4 * S + 1},
    {"ID": 9, "NAME": "late-insert", "__change_type": "I", "t": 2 * S},
    {"ID": 3, "NAME": "late-upsert", "__change_type": "A", "t": 3 * S},
    {"ID": 2, "NAME": "n2-new", "__change_type": "U", "t": 3 * S},  # no tombstone: applied
]
NEWER = [
    {"ID": 1, "NAME": "n1-again", "__change_type": "U", "t": 5 * S},  # the delete's time: wins
    {"ID": 9, "NAME": "n9-later", "__change_type": "I", "t": 6 * S},
]


@pytest.fixture
def lake(spark, tmp_path):
    """apply(rows, batch_id, engine) applies rows to one table through the router.

    Strict, the engine asked for must apply them; else delta-rs may leave a batch to Spark.
    """
    schema = sample_schema()
    table = TableManager(spark, str(tmp_path)).ensure(schema)
    writes = DeltaRsWrites()

    def apply(rows, batch_id, engine, strict=True):
        # "spark/delta-rs": Spark applies, its tombstones go through delta-rs (where it
        # reaches them, as in the writer); "spark": Spark alone (delta-rs off)
        router = Router(
            writes if "delta-rs" in engine else DeltaRsWrites(0), str(tmp_path), 0, "w1"
        )
        data = TableRows(table, rows_df(spark, schema, rows))
        chosen = router.engine_for(data, len(rows)) if engine == "delta-rs" else "spark"
        result = router.apply(data, batch_id, (), spark, chosen)
        wanted = engine.split("/")[0]
        assert result.engine == wanted or not strict, "strict: the engine asked for applies"
        return result

    return apply, table


def _graves(spark, table) -> list[tuple[int, int]]:
    from pyspark.sql import functions as F

    graves = spark.read.format("delta").load(table.tombstones)
    return sorted(
        (r[0], r[1]) for r in graves.select("k0", F.unix_micros("__change_time")).collect()
    )


@pytest.mark.parametrize("engine", ["spark", "spark/delta-rs", "delta-rs"])
def test_a_deleted_key_stays_deleted_when_an_older_row_arrives_later(spark, lake, engine):
    apply, table = lake
    apply(FIRST, 0, engine)
    apply(DELETES, 1, engine)
    apply(EARLY, 2, engine)
    assert table_rows(spark, table.path) == [(0, "n0"), (2, "n2"), (30, "n30")]
    assert _graves(spark, table) == [(1, T0 + 5 * S), (3, T0 + 4 * S), (9, T0 + 5 * S)]

    apply(LATE, 3, engine)
    assert table_rows(spark, table.path) == [(0, "n0"), (2, "n2-new"), (30, "n30")]

    apply(NEWER, 4, engine)
    assert table_rows(spark, table.path) == [
        (0, "n0"),
        (1, "n1-again"),
        (2, "n2-new"),
        (9, "n9-later"),
        (30, "n30"),
    ]


# A batch whose UPDATE moves key 2 to 1 and a later UPDATE of it moves key 1 on to 40: the
# batch leaves tombstones for 2 and 1, and must still see its own rows as they came.
MOVES = [
    {"ID": 2, "NAME": "n2", "__change_type": "B", "t": 6 * S, "__source_rowid": "r2"},
    {"ID": 1, "NAME": "n1-moved", "__change_type": "U", "t": 6 * S, "__source_rowid": "r2"},
    {"ID": 1, "NAME": "n1-moved", "__change_type": "B", "t": 7 * S, "__source_rowid": "r1"},
    {"ID": 40, "NAME": "n40", "__change_type": "U", "t": 7 * S, "__source_rowid": "r1"},
]


def test_a_batchs_own_tombstones_do_not_outlive_its_rows(spark, lake):
    """The tombstones a batch leaves are written before its MERGE; Spark's MERGE source,
    cached across that write, once read them again and lost the UPDATE the first move needs
    (key 2 stayed). Spark alone: it reads the tombstones itself, as on remote storage."""
    apply, table = lake
    apply(FIRST, 0, "spark")
    apply(DELETES, 1, "spark")  # the table has tombstones, all older than the next batch
    apply(MOVES, 2, "spark")
    assert table_rows(spark, table.path) == [(0, "n0"), (30, "n30"), (40, "n40")]
    assert {(1, T0 + 7 * S), (2, T0 + 6 * S)} <= set(_graves(spark, table))


def _two_producers(seed: int) -> tuple[list[dict], list[list[dict]]]:
    """Changes of 6 keys at distinct times from two producers, and the batches they arrive in.

    Each producer sends its own changes in time order; the two streams interleave at random,
    so one producer's older changes often arrive after the other's newer ones.
    """
    rng = random.Random(seed)
    times = rng.sample(range(1, 400), 40)
    changes = [
        {"ID": rng.randrange(6), "NAME": f"v{t}", "__change_type": rng.choice("IUARDX"), "t": t * S}
        for t in times
    ]
    producers = [
        sorted(changes[:20], key=lambda c: c["t"]),
        sorted(changes[20:], key=lambda c: c["t"]),
    ]
    arrived = []
    while any(producers):
        arrived.append(rng.choice([p for p in producers if p]).pop(0))
    batches, start = [], 0
    while start < len(arrived):
        size = rng.randint(1, 8)
        batches.append(arrived[start : start + size])
        start += size
    return changes, batches


# Spark alone is in the reference model's late-producer test (its "spark" path)
@pytest.mark.parametrize("engine", ["spark/delta-rs", "delta-rs"])
def test_two_producers_out_of_order_leave_each_keys_latest_change(spark, lake, engine):
    """Whatever order the changes arrive in, a key holds its latest change: the newest of its
    rows, or nothing when that change deletes it."""
    apply, table = lake
    changes, batches = _two_producers(seed=7)
    engines = [apply(rows, i, engine, strict=False).engine for i, rows in enumerate(batches)]
    latest: dict[int, dict] = {}
    for change in sorted(changes, key=lambda c: c["t"]):
        latest[change["ID"]] = change
    want = sorted((k, c["NAME"]) for k, c in latest.items() if c["__change_type"] not in ("D", "X"))
    assert table_rows(spark, table.path) == want, f"batches: {batches}"
    assert engine.split("/")[0] in engines


def test_a_replayed_batch_leaves_its_tombstones_once_whichever_engine_replays(spark, lake):
    from delta.tables import DeltaTable

    apply, table = lake
    apply(FIRST, 0, "delta-rs")
    apply(DELETES, 1, "delta-rs")
    versions = DeltaTable.forPath(spark, table.tombstones).history().count()
    apply(DELETES, 1, "spark")
    apply(DELETES, 1, "spark/delta-rs")
    apply(DELETES, 1, "delta-rs")
    assert DeltaTable.forPath(spark, table.tombstones).history().count() == versions
    assert _graves(spark, table) == [(1, T0 + 5 * S), (3, T0 + 4 * S)]


def test_maintain_drops_the_tombstones_past_their_retention(spark, lake, tmp_path):
    apply, table = lake
    apply(FIRST, 0, "spark")
    apply(DELETES, 1, "spark")  # deletes of 2023: older than any retention
    now_us = int(time.time() * S)
    apply([{"ID": 0, "NAME": "n0", "__change_type": "D", "__change_time": now_us}], 2, "spark")
    assert len(_graves(spark, table)) == 3

    reports = maintain_tables(spark, str(tmp_path), settings=MaintainSettings())
    graves = [r for r in reports if r.table.startswith("_tombstones/")]
    assert [(r.table, r.error) for r in graves] == [("_tombstones/SHOP.ORDERS", None)]
    assert _graves(spark, table) == [(0, now_us)]
    assert table_rows(spark, table.path) == [(2, "n2"), (30, "n30")]
