"""Every node of the three-broker cluster restarted in turn while a continuous writer runs.

A rolling restart, as operators upgrade a cluster: each node in turn stops the orderly way
(SIGTERM: its leaders move to the other nodes), a flow commits a transaction while it is
away, and it comes back and catches up before the next one goes. ``lakehouse-writer run``
(continuous, in its own process) reads all along; once it has applied everything it is
stopped with SIGTERM, and its Delta table must hold every source row exactly once.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from devstack import cluster
from devstack.cluster import ClusterLayout
from tests.cluster_kafka.conftest import delta_hashes, difference, new_flow, run
from tests.support.writer import WriterProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

INITIAL, STEP = 20_000, 10_000  # the initial load, then one delta load per node away
CATCH_UP_S = 180.0


def _delta_load(flow) -> str:
    """A delta load; a failed one is run again (its pointer did not move). Returns statuses."""
    first = run(flow, "delta")
    return first.status if first.status == "COMPLETED" else f"FAILED+{run(flow, 'delta').status}"


def test_rolling_restart_under_a_continuous_writer_every_row_lands_once(
    flow_env: ClusterLayout, spark, tmp_path: Path
):
    flow = new_flow(INITIAL + cluster.SIZE * STEP)
    flow.rows, flow.step = INITIAL, STEP
    assert run(flow, "initial").status == "COMPLETED"
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    args = ["--lakehouse", str(lake), "--checkpoint", str(ckpt), "--topics", flow.topic]
    args += ["--bootstrap-servers", flow_env.bootstrap, "--trigger-interval", "2"]
    writer = WriterProcess(args, {}, tmp_path / "writer.log", str(ckpt))
    try:
        writer.wait_for_batch_after(-1, CATCH_UP_S)
        runs = []
        for node in range(1, cluster.SIZE + 1):
            assert cluster.stop(flow_env, node)
            runs.append(_delta_load(flow))
            cluster.start(flow_env, node)
            cluster.wait_in_sync(flow_env)
        expected = flow.source_hashes(INITIAL + cluster.SIZE * STEP)
        _wait_for_rows(spark, lake, sum(expected.values()), writer)
    finally:
        if writer.proc.poll() is None:
            writer.proc.send_signal(signal.SIGTERM)  # the driver; it stops its JVM itself
        code = writer.wait(120)
    print(f"rolling restart: delta runs {runs}, writer exit {code}")
    assert all(r.endswith("COMPLETED") for r in runs), runs
    actual = delta_hashes(spark, lake)
    assert actual == expected, f"Delta differs from the source: {difference(expected, actual)}"
    assert code == 0, writer.tail()


def _wait_for_rows(spark, lake: Path, rows: int, writer: WriterProcess) -> None:
    """Wait until the writer's table holds ``rows`` rows (or more: duplicates show later)."""
    deadline, seen = time.monotonic() + CATCH_UP_S, 0
    while time.monotonic() < deadline:
        assert writer.proc.poll() is None, f"the writer ended:\n{writer.tail()}"
        seen = sum(delta_hashes(spark, lake).values())
        if seen >= rows:
            return
        time.sleep(2)
    raise AssertionError(f"the writer applied {seen} of {rows} rows:\n{writer.tail()}")
