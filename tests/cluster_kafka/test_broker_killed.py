"""A node of the three-broker cluster SIGKILLed while a flow produces or the writer reads.

Topics have three replicas, two of which must be in sync (``min.insync.replicas=2``), so
losing one node must neither lose a committed row nor let one through twice: the flow's run
commits everything, or fails and a rerun commits everything once, and the writer's Delta
table holds every source row exactly once (compared by row hash). The table has no key: the
writer appends, so a row delivered twice would show twice.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from devstack import cluster
from devstack.cluster import ClusterLayout
from lakehouse_writer.cli import main
from producer_lib import KafkaProducer
from tests.cluster_kafka.conftest import (
    PARTITIONS,
    delta_hashes,
    difference,
    kafka_hashes,
    led_by,
    new_flow,
    run,
    transaction_coordinator,
)
from tests.cluster_kafka.flow import RowsFlow
from tests.support.writer import WriterProcess, once_argv

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROWS = 50_000
CHUNKS = 5  # the kill comes after the second of five parts: the transaction is open
WRITER_TIMEOUT_S = 300.0


def _wait_until_logged(layout: ClusterLayout, topic: str, rows: int) -> None:
    """Wait until ``rows`` messages of the open transaction are replicated (high watermarks)."""
    consumer = Consumer(
        {
            "bootstrap.servers": layout.bootstrap,
            "group.id": "watermarks",
            "isolation.level": "read_uncommitted",  # read_committed would answer the LSO
        }
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ends = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                for p in range(PARTITIONS)
            ]
            if sum(ends) >= rows:
                return
            time.sleep(0.05)
        raise AssertionError(f"only {sum(ends)} of {rows} rows reached the brokers")
    finally:
        consumer.close()


def _assert_delta_equals_source(spark, flow: RowsFlow, lake: Path) -> None:
    expected, actual = flow.source_hashes(ROWS), delta_hashes(spark, lake)
    assert actual == expected, f"Delta differs from the source: {difference(expected, actual)}"


def test_coordinator_killed_mid_transaction_every_row_lands_once(
    flow_env: ClusterLayout, spark, tmp_path: Path
):
    """The node coordinating the flow's transaction, also a data partition's leader, dies
    after 2 of 5 parts were sent; it is restarted once the run has ended."""
    flow = new_flow(ROWS)
    flow.chunks = CHUNKS
    killed: dict[str, Any] = {}

    def kill_coordinator(producer: KafkaProducer, chunk: int) -> None:
        if chunk != 1:
            return
        _wait_until_logged(flow_env, flow.topic, 2 * ROWS // CHUNKS)
        node = transaction_coordinator(flow_env, producer.transactional_id)
        killed.update(node=node, led=led_by(flow_env, flow.topic, node))
        cluster.kill(flow_env, node)

    flow.between_chunks = kill_coordinator
    started = time.monotonic()
    first = run(flow, "initial")
    elapsed = time.monotonic() - started
    assert killed.get("led"), "the killed coordinator led no partition of the data topic"
    comeback = threading.Thread(target=cluster.start, args=(flow_env, killed["node"]))
    comeback.start()  # back while the rest of the test reads: the writer sees it return
    try:
        flow.between_chunks = None
        runs = [first] if first.status == "COMPLETED" else [first, run(flow, "initial")]
        assert runs[-1].status == "COMPLETED", runs[-1].error
        print(
            f"killed node {killed['node']} (coordinator, leader of partitions {killed['led']}): "
            f"runs {[r.status for r in runs]}, the first took {elapsed:.1f}s"
        )
        expected, published = flow.source_hashes(ROWS), kafka_hashes(flow_env, flow.topic)
        assert published == expected, f"Kafka differs: {difference(expected, published)}"
        lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
        assert main(once_argv(lake, ckpt, flow.topic, flow_env.bootstrap)) == 0
    finally:
        comeback.join()
    _assert_delta_equals_source(spark, flow, lake)


def test_leader_killed_while_the_writer_reads_every_row_lands_once(
    flow_env: ClusterLayout, spark, tmp_path: Path
):
    """The writer (``run --once`` in its own process) has planned its batch when the leader
    of partition 0 dies; the node comes back while the writer runs."""
    flow = new_flow(ROWS)
    assert run(flow, "initial").status == "COMPLETED"
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, flow.topic, flow_env.bootstrap)
    writer = WriterProcess(argv[1:], {}, tmp_path / "writer.log", str(ckpt))
    planned, done = ckpt / "offsets" / "0", ckpt / "commits" / "0"
    deadline = time.monotonic() + WRITER_TIMEOUT_S
    while not planned.exists():
        assert writer.proc.poll() is None, f"the writer ended early:\n{writer.tail()}"
        assert time.monotonic() < deadline, f"no batch planned:\n{writer.tail()}"
        time.sleep(0.01)
    node = cluster.leader(flow_env, flow.topic, 0)
    cluster.kill(flow_env, node)
    assert not done.exists(), "the batch was done before the kill"
    comeback = threading.Thread(target=cluster.start, args=(flow_env, node))
    comeback.start()
    try:
        code = writer.wait(WRITER_TIMEOUT_S)
    finally:
        comeback.join()
    print(f"killed node {node} (leader of partition 0) during batch 0: writer exit {code}")
    if code != 0:
        assert main(argv) == 0
    _assert_delta_equals_source(spark, flow, lake)
