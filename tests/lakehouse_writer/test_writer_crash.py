"""Crash safety: kill -9 the writer at random points of a 100k-row load, restart, compare.

The load is produced by the real producer from DuckDB (TRUNCATE + REPLACE of 100k rows, then
updates, deletes and inserts; three partitions). The writer runs as `python -m
lakehouse_writer run` with small batches and is killed (the whole process group: driver and
JVM) at random moments a few times (fewer when the runs before got through every batch), then
drained with ``--once``. The Delta table must equal
the final DuckDB table, every commit must be in ``_commits`` once, and the Delta log must
show every (txnAppId, txnVersion) committed once: no batch was applied twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter

import duckdb
import pytest

from tests.support.orders_history import arrow_rows, produce_orders_history, txn_actions
from tests.support.writer import WriterProcess

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

log = logging.getLogger(__name__)

ROWS, NEW_ROWS = 100_000, 5_000
KILLS = 3
BATCH = 15_000  # --max-offsets-per-trigger: ~9 batches for the ~130k messages


def test_kill_9_at_random_points_then_restart_gives_exactly_the_source(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    started = time.monotonic()
    topic, schemas = new_topic(partitions=3), new_topic(suffix="_schemas")
    con = duckdb.connect()
    commit_ids = produce_orders_history(
        kafka_bootstrap, topic, schemas, con, ROWS, NEW_ROWS, "crash"
    )
    produced = time.monotonic()
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    args = [
        "--lakehouse",
        str(lake),
        "--checkpoint",
        str(checkpoint),
        "--topics",
        f"{topic}|_commits",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--max-offsets-per-trigger",
        str(BATCH),
        "--trigger-interval",
        "0",
    ]
    env = {"LAKEHOUSE_SCHEMAS_TOPIC": schemas}
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for attempt in range(KILLS):
        writer = WriterProcess(args, env, tmp_path / "writer.log", str(checkpoint))
        try:
            done = (writer.status() or {}).get("last_batch_id", -1)
            found = writer.wait_for_batch_or_idle(done, timeout_s=300)  # progress in each run
            if found is not None:
                time.sleep(rng.uniform(0.5, 10.0))  # somewhere in the next batch, or between
        finally:
            writer.kill9()
        if found is None:  # an earlier run got through every batch: nothing left to kill in
            log.warning("no kill %d seed=%d: all read after batch %d", attempt + 1, seed, done)
            assert attempt > 0, "the first run found nothing to do"
            break
        log.warning("kill %d seed=%d after batch %d", attempt + 1, seed, found)
    final = WriterProcess([*args, "--once"], env, tmp_path / "writer.log", str(checkpoint))
    assert final.wait(600) == 0, final.tail()
    drained = time.monotonic()

    expected = arrow_rows(con.sql("select ID, NAME, REGION, AMOUNT from ORDERS").to_arrow_table())
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    got = arrow_rows(table.select("ID", "NAME", "REGION", "AMOUNT").toArrow())
    assert [k for k, n in Counter(r[0] for r in got).items() if n > 1] == []  # no duplicate key
    assert len(got) == len(expected) == ROWS - len(range(0, ROWS, 11)) + NEW_ROWS
    assert got == expected, f"seed={seed}"

    commits = spark.read.format("delta").load(str(lake / "_commits"))
    mine = [r for r in commits.collect() if r.commit_id in commit_ids]
    assert sorted(r.commit_id for r in mine) == sorted(commit_ids)  # each once
    last = next(r for r in mine if r.commit_id == commit_ids[-1])
    at_commit = (
        spark.read.format("delta")
        .option("versionAsOf", last.table_versions["SHOP.ORDERS"])
        .load(str(lake / "SHOP" / "ORDERS"))
    )
    assert at_commit.filter(f"ID >= {ROWS}").count() == NEW_ROWS  # the commit is visible there

    for name in ("SHOP/ORDERS", "_commits", "_writer_state"):
        seen, unguarded = txn_actions(lake / name)
        assert unguarded == [], f"{name}: writes without txnAppId/txnVersion"
        assert [k for k, n in seen.items() if n > 1] == [], f"{name}: applied twice (seed={seed})"
    print(
        f"crash test seed={seed} produce_s={produced - started:.1f} "
        f"writer_s={drained - produced:.1f} total_s={time.monotonic() - started:.1f}"
    )
