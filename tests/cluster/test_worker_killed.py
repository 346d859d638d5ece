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

import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from tests.cluster.conftest import SparkCluster, delta_rows, spark_submit_argv, submit_env
from tests.support.orders_history import arrow_rows, produce_orders_history, txn_actions

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]

ROWS, NEW_ROWS = 150_000, 5_000


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
    commit_ids = produce_orders_history(
        kafka_bootstrap, topic, schemas, con, ROWS, NEW_ROWS, "cluster"
    )
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

    expected = arrow_rows(con.sql("select ID, NAME, REGION, AMOUNT from ORDERS").to_arrow_table())
    got = delta_rows(lake / "SHOP" / "ORDERS", ("ID", "NAME", "REGION", "AMOUNT"))
    assert [k for k, n in Counter(r[0] for r in got).items() if n > 1] == []  # no duplicate key
    assert len(got) == ROWS - len(range(0, ROWS, 11)) + NEW_ROWS
    assert got == expected
    mine = [c for (c,) in delta_rows(lake / "_commits", ("commit_id",)) if c in commit_ids]
    assert sorted(mine) == sorted(commit_ids)  # each once
    for name in ("SHOP/ORDERS", "_commits", "_writer_state"):
        twice = [k for k, n in txn_actions(lake / name)[0].items() if n > 1]
        assert twice == [], f"{name}: applied twice"
