"""A running writer keeps its status file fresh during a long batch (the heartbeat).

``status`` calls a ``running`` file nobody has rewritten for three heartbeats a writer that is
gone, and ``resume-table`` refuses while it is fresh: a batch that takes long (no progress
report for minutes) must not look like a dead writer. A real streaming query whose second
batch blocks stands for it; the heartbeat is shortened to 1 s.
"""

from __future__ import annotations

import threading
import time

import pytest

from lakehouse_writer.runtime import status
from lakehouse_writer.runtime.status import BatchStats, read_status, record_lag, status_age_s

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_status_is_rewritten_while_a_batch_runs_long(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(status, "HEARTBEAT_S", 1.0)
    checkpoint = str(tmp_path / "ckpt")
    release = threading.Event()

    def batch(_df: object, batch_id: int) -> None:
        if batch_id >= 1:
            release.wait(60)

    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 5)
        .load()
        .writeStream.foreachBatch(batch)
        .trigger(processingTime="0.2 seconds")
        .option("checkpointLocation", str(tmp_path / "spark"))
        .start()
    )
    stats = BatchStats()
    try:
        deadline = time.monotonic() + 120
        while stats.lag_batch_id < 0 and time.monotonic() < deadline:  # batch 0's report
            record_lag(query, stats, checkpoint)
            time.sleep(0.2)
        assert stats.lag_batch_id == 0
        writes = set()
        until = time.monotonic() + 5  # batch 1 blocks: no new report comes meanwhile
        while time.monotonic() < until:
            record_lag(query, stats, checkpoint)
            writes.add((read_status(checkpoint) or {})["updated_at"])
            time.sleep(0.2)
        assert stats.lag_batch_id == 0  # no progress: only the heartbeat wrote
        assert len(writes) >= 3, writes
        assert status_age_s(read_status(checkpoint) or {}) < 3
    finally:
        release.set()
        query.stop()
