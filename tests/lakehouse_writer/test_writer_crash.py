"""Crash safety: kill -9 the writer at random points of a 200k-row load, restart, compare.

The load is produced by the real producer from DuckDB (TRUNCATE + REPLACE of 200k rows, then
updates, deletes and inserts; three partitions). The writer runs as `python -m
lakehouse_writer run` with small batches and is killed (the whole process group: driver and
JVM) at random moments a few times, then drained with ``--once``. The Delta table must equal
the final DuckDB table, every commit must be in ``_commits`` once, and the Delta log must
show every (txnAppId, txnVersion) committed once: no batch was applied twice.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from producer_lib import (
    KafkaProducer,
    KafkaSettings,
    KeySchema,
    RowType,
    create_key_row,
    create_truncate_row,
)
from producer_lib.kafka.catalog import EmbeddedCatalog
from tests.support.writer import WriterProcess, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

log = logging.getLogger(__name__)

ROWS, NEW_ROWS = 200_000, 10_000
KILLS = 3
BATCH = 60_000  # --max-offsets-per-trigger: ~5 batches for the ~260k messages
_DATA_OPERATIONS = {"WRITE", "MERGE", "DELETE"}


def _source(con: duckdb.DuckDBPyConnection, first: int, count: int) -> str:
    return (
        f"select i::BIGINT as ID, 'name ' || i as NAME, ['A', 'B', 'C'][i % 3 + 1] as "
        f"REGION, (i % 1000)::DECIMAL(10, 2) as AMOUNT from range({first}, "
        f"{first + count}) t(i)"
    )


def _produce(bootstrap: str, topic: str, schemas: str, con: duckdb.DuckDBPyConnection) -> list:
    """Four transactions; DuckDB's ORDERS ends as the state the lakehouse must reach."""
    schema, settings = sample_schema(), KafkaSettings(bootstrap_servers=bootstrap)
    con.execute(f"create table ORDERS as {_source(con, 0, ROWS)}")
    ids = []
    with KafkaProducer(
        "TEST",
        f"crash_{uuid.uuid4().hex[:8]}",
        "test",
        "test",
        settings,
        duckdb_connection=con,
        schema_catalog=EmbeddedCatalog(settings, topic=schemas),
    ) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        truncate = create_truncate_row(schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate, KeySchema(schema)),
            truncate,
            RowType.TRUNCATE,
            partition=0,
        )
        producer.produce_from_duckdb("ORDERS", target, 50_000, RowType.REPLACE)
        ids.append(producer.commit())
        con.execute("update ORDERS set NAME = NAME || ' v2', AMOUNT = AMOUNT + 1 where ID % 7 = 0")
        producer.produce_from_duckdb(
            "select * from ORDERS where ID % 7 = 0", target, 50_000, RowType.UPDATE
        )
        ids.append(producer.commit())
        producer.produce_from_duckdb(
            "select * from ORDERS where ID % 11 = 0", target, 50_000, RowType.DELETE
        )
        con.execute("delete from ORDERS where ID % 11 = 0")
        ids.append(producer.commit())
        con.execute(f"insert into ORDERS {_source(con, ROWS, NEW_ROWS)}")
        producer.produce_from_duckdb(
            f"select * from ORDERS where ID >= {ROWS}", target, 50_000, RowType.INSERT
        )
        ids.append(producer.commit())
    return ids


def _rows(table) -> list[tuple]:
    """A pyarrow table's rows as sorted tuples."""
    return sorted(
        zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True)
    )


def _txn_actions(table: Path) -> tuple[Counter, list[tuple[int, str]]]:
    """(times each (appId, version) was committed, data commits without a txn action)."""
    seen: Counter = Counter()
    unguarded = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        txns = [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a]
        seen.update(txns)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("operation") in _DATA_OPERATIONS and not txns:
            unguarded.append((int(commit.stem), info["operation"]))
    return seen, unguarded


def test_kill_9_at_random_points_then_restart_gives_exactly_the_source(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    started = time.monotonic()
    topic, schemas = new_topic(partitions=3), new_topic(suffix="_schemas")
    con = duckdb.connect()
    commit_ids = _produce(kafka_bootstrap, topic, schemas, con)
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
            done = writer.wait_for_batch_after(done, timeout_s=300)  # progress in each run
            time.sleep(rng.uniform(0.5, 10.0))  # somewhere in the next batch, or between
        finally:
            writer.kill9()
        log.warning("kill %d seed=%d after batch %d", attempt + 1, seed, done)
    final = WriterProcess([*args, "--once"], env, tmp_path / "writer.log", str(checkpoint))
    assert final.wait(600) == 0, final.tail()
    drained = time.monotonic()

    expected = _rows(con.sql("select ID, NAME, REGION, AMOUNT from ORDERS").to_arrow_table())
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    got = _rows(table.select("ID", "NAME", "REGION", "AMOUNT").toArrow())
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
        seen, unguarded = _txn_actions(lake / name)
        assert unguarded == [], f"{name}: writes without txnAppId/txnVersion"
        assert [k for k, n in seen.items() if n > 1] == [], f"{name}: applied twice (seed={seed})"
    print(
        f"crash test seed={seed} produce_s={produced - started:.1f} "
        f"writer_s={drained - produced:.1f} total_s={time.monotonic() - started:.1f}"
    )
