"""A worker of the cluster dies (SIGKILL, with its executor) while the writer applies a batch.

``test_writer_crash.py``'s load, smaller: the real producer writes a TRUNCATE and a REPLACE of
ROWS rows from DuckDB, then updates, deletes and inserts, over two partitions. The writer runs
through ``spark-submit`` on the two-worker cluster with ``--once`` (one big first batch).
Once the batch's offsets are planned (``offsets/0`` in the checkpoint) and an executor runs
its tasks, one worker's process group is SIGKILLed. Spark retries the lost tasks on the other
worker; the run ends 0 and the table equals DuckDB's, each commit once in ``_commits``, each
(txnAppId, txnVersion) once in every Delta log.
"""

from __future__ import annotations

import json
import re
import subprocess
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
from tests.cluster.conftest import SparkCluster, delta_rows, spark_submit_argv, submit_env
from tests.support.writer import sample_schema

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]

ROWS, NEW_ROWS = 150_000, 5_000


def _source(first: int, count: int) -> str:
    return (
        f"select i::BIGINT as ID, 'name ' || i as NAME, ['A', 'B', 'C'][i % 3 + 1] as "
        f"REGION, (i % 1000)::DECIMAL(10, 2) as AMOUNT from range({first}, "
        f"{first + count}) t(i)"
    )


def _produce(bootstrap: str, topic: str, schemas: str, con: duckdb.DuckDBPyConnection) -> list:
    """Four transactions; DuckDB's ORDERS ends as the state the lakehouse must reach."""
    schema, settings = sample_schema(), KafkaSettings(bootstrap_servers=bootstrap)
    con.execute(f"create table ORDERS as {_source(0, ROWS)}")
    ids = []
    with KafkaProducer(
        "TEST",
        f"cluster_{uuid.uuid4().hex[:8]}",
        "test",
        "test",
        settings,
        duckdb_connection=con,
        schema_catalog=EmbeddedCatalog(settings, topic=schemas),
    ) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        truncate = create_truncate_row(schema, None)
        key = create_key_row(truncate, KeySchema(schema))
        producer.produce_row(target, key, truncate, RowType.TRUNCATE, partition=0)
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
        con.execute(f"insert into ORDERS {_source(ROWS, NEW_ROWS)}")
        producer.produce_from_duckdb(
            f"select * from ORDERS where ID >= {ROWS}", target, 50_000, RowType.INSERT
        )
        ids.append(producer.commit())
    return ids


def _rows(table) -> list[tuple]:
    """A pyarrow table's rows as sorted tuples."""
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*columns, strict=True))


def _txn_counts(table: Path) -> Counter:
    seen: Counter = Counter()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line else {}
            if "txn" in action:
                seen[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return seen


def _tasks_started(cluster: SparkCluster, worker: int) -> int:
    """``Running task`` lines in the worker's executor logs so far."""
    return sum(
        log.read_text(errors="replace").count("Running task")
        for log in cluster.executor_logs(worker)
    )


def _kill_mid_batch(
    cluster: SparkCluster, writer: subprocess.Popen, ckpt: Path, log: Path
) -> tuple[int, int]:
    """Wait for batch 0's tasks on a worker's executor, SIGKILL that worker; (worker, batch).

    Raises:
        AssertionError: The writer ended, or finished the batch, before the kill.
    """
    deadline = time.monotonic() + 600
    batch = 0
    while time.monotonic() < deadline:
        assert writer.poll() is None, log.read_text(errors="replace")[-4000:]
        if (ckpt / "offsets" / str(batch)).exists():
            break
        time.sleep(0.2)
    before = [_tasks_started(cluster, w) for w in range(len(cluster.workers))]
    while time.monotonic() < deadline:
        assert writer.poll() is None, log.read_text(errors="replace")[-4000:]
        busy = [w for w, n in enumerate(before) if _tasks_started(cluster, w) > n]
        if busy:
            time.sleep(2)  # well into the batch's jobs
            assert not (ckpt / "commits" / str(batch)).exists(), "the batch ended before"
            cluster.kill_worker(busy[-1])
            return busy[-1], batch
        time.sleep(0.2)
    raise AssertionError("no executor ran a task of the first batch")


def test_a_worker_killed_mid_batch_the_batch_is_retried_and_the_table_is_exact(
    spark_cluster, connector_jars, writer_main, kafka_bootstrap, new_topic, tmp_path
):
    topic, schemas = new_topic(partitions=2), new_topic(suffix="_schemas")
    con = duckdb.connect()
    commit_ids = _produce(kafka_bootstrap, topic, schemas, con)
    lake, ckpt, log = tmp_path / "lake", tmp_path / "ckpt", tmp_path / "writer.log"
    writer_args = [
        "--lakehouse",
        str(lake),
        "--checkpoint",
        str(ckpt),
        "--once",
        "--topics",
        f"{topic}|_commits",
        "--bootstrap-servers",
        kafka_bootstrap,
    ]
    argv = spark_submit_argv(spark_cluster, connector_jars, writer_main, writer_args)
    env = submit_env(LAKEHOUSE_SCHEMAS_TOPIC=schemas, LAKEHOUSE_SMALL_MERGE_ROWS="0")
    with open(log, "ab") as out:
        writer = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            killed, batch = _kill_mid_batch(spark_cluster, writer, ckpt, log)
            code = writer.wait(900)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(60)
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]
    assert spark_cluster.workers[killed].poll() is not None  # it stayed dead
    assert "Lost executor" in text, "no executor was lost"
    assert re.search(r"Starting task \d+\.[1-9]\d* in stage", text), "no task was retried"
    assert (ckpt / "commits" / str(batch)).exists()  # the batch was done, after a retry

    expected = _rows(con.sql("select ID, NAME, REGION, AMOUNT from ORDERS").to_arrow_table())
    got = delta_rows(lake / "SHOP" / "ORDERS", ("ID", "NAME", "REGION", "AMOUNT"))
    assert [k for k, n in Counter(r[0] for r in got).items() if n > 1] == []  # no duplicate key
    assert len(got) == ROWS - len(range(0, ROWS, 11)) + NEW_ROWS
    assert got == expected
    mine = [c for (c,) in delta_rows(lake / "_commits", ("commit_id",)) if c in commit_ids]
    assert sorted(mine) == sorted(commit_ids)  # each once
    for name in ("SHOP/ORDERS", "_commits", "_writer_state"):
        twice = [k for k, n in _txn_counts(lake / name).items() if n > 1]
        assert twice == [], f"{name}: applied twice"
