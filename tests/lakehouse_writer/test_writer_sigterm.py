"""SIGTERM stops `python -m lakehouse_writer run` (continuous) after its current batch."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.writer import (
    T0,
    WriterProcess,
    commit_message,
    produce_transaction,
    publish_schemas,
    sample_schema,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

TRANSACTIONS, ROWS = 8, 5  # one partition: rows of transaction k sit at offsets 6k .. 6k+4


def _end_offsets(checkpoint: Path, batch_id: int) -> dict[str, int]:
    """End offsets (exclusive) of partition 0 per topic after ``batch_id``, from the checkpoint."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    source = json.loads(lines[2])
    return {topic: int(parts["0"]) for topic, parts in source.items()}


def test_sigterm_stops_after_the_current_batch_with_consistent_tables(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic()
    schemas, commits = new_topic(suffix="_schemas"), new_topic(suffix="_commits")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    commit_ids = []
    for k in range(TRANSACTIONS):
        rows = [
            {"ID": k * ROWS + i, "NAME": f"n{k}", "__change_type": "I", "__change_time": T0 + k}
            for i in range(ROWS)
        ]
        first = k * (ROWS + 1)
        record = commit_message(
            commits,
            0,
            T0 + k,
            ends=[(topic, 0, first, first + ROWS - 1)],
            tables=[(topic, "SHOP.ORDERS", ROWS)],
        )
        commit_ids.append(record[3].decode())
        produce_transaction(
            kafka_bootstrap, topic, schema, rows, extra=[(commits, record[3], record[4])]
        )

    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    writer = WriterProcess(
        [
            "--lakehouse",
            str(lake),
            "--checkpoint",
            str(checkpoint),
            "--topics",
            f"{topic}|{commits}",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--max-offsets-per-trigger",
            "6",
            "--trigger-interval",
            "0",
        ],
        {"LAKEHOUSE_SCHEMAS_TOPIC": schemas, "LAKEHOUSE_COMMITS_TOPIC": commits},
        tmp_path / "writer.log",
        str(checkpoint),
    )
    try:
        writer.wait_for_batch_after(1, timeout_s=300)  # three batches: a whole transaction
        writer.proc.send_signal(signal.SIGTERM)
        code = writer.wait(180)
    finally:
        if writer.proc.poll() is None:
            writer.kill9()
    log = writer.tail(400)
    assert code == 0, log
    assert "stopping after the current batch" in log
    status = writer.status()
    assert status and status["state"] == "stopped", status
    last = status["last_batch_id"]
    assert (checkpoint / "commits" / str(last)).exists()  # Spark recorded the last batch

    # the tables hold the whole transactions the checkpoint says were read; one cut by the
    # last batch's end waits for the next start (lakehouse_writer.read.holdback)
    ends = _end_offsets(checkpoint, last)
    whole = [k for k in range(TRANSACTIONS) if k * (ROWS + 1) + ROWS - 1 < ends.get(topic, 0)]
    expected_ids = sorted(k * ROWS + i for k in whole for i in range(ROWS))
    assert 0 < len(expected_ids) < TRANSACTIONS * ROWS, "the stop came before or after all rows"
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    assert sorted(r.ID for r in table.collect()) == expected_ids
    complete = [
        commit_ids[k]
        for k in range(TRANSACTIONS)
        if k * (ROWS + 1) + ROWS - 1 < ends.get(topic, 0) and 2 * k < ends.get(commits, 0)
    ]
    written = spark.read.format("delta").load(str(lake / "_commits")).collect() if complete else []
    assert sorted(r.commit_id for r in written) == sorted(complete)
