"""A three-broker Kafka cluster of the session (``devstack.cluster``), which tests may break.

Started once on free loopback ports in a temp folder and stopped at the end; every node is
back and every replica in sync after each test, whatever the test did to it. Flows reach it
through ``KAFKA_*`` as users configure them, with three replicas per topic.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack import cluster
from devstack.cluster import ClusterLayout
from producer_lib import RunFailed, RunResult
from tests.cluster_kafka.flow import NAMESPACE, TABLE, RowsFlow, row_hashes
from tests.support.decode import decoded_values
from tests.support.ports import free_port_block

REPLICAS = 3
PARTITIONS = 3  # one partition led by each node: any node lost is a leader lost
TRANSACTION_TIMEOUT_MS = 60_000


@pytest.fixture(scope="package")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterLayout]:
    """Three KRaft nodes (broker + controller each), RF 3 and min ISR 2, for this folder."""
    root = tmp_path_factory.mktemp("devstack") / "kafka-cluster"
    layout = cluster.up(ClusterLayout(root=root, base_port=free_port_block(2 * cluster.SIZE)))
    try:
        yield layout
    finally:
        gc.collect()  # clients of failed tests would retry the stopped nodes, logging each
        cluster.down(layout)


@pytest.fixture(autouse=True)
def every_node_back(kafka_cluster: ClusterLayout) -> Iterator[None]:
    """After each test: every node runs again and every replica is in sync."""
    yield
    for node_id, pid in cluster.status(kafka_cluster).items():
        if pid is None:
            cluster.start(kafka_cluster, node_id)
    cluster.wait_in_sync(kafka_cluster)


@pytest.fixture
def flow_env(monkeypatch: pytest.MonkeyPatch, kafka_cluster: ClusterLayout) -> ClusterLayout:
    """Flows and the writer of this test reach the cluster; topics get three replicas."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_cluster.bootstrap)
    monkeypatch.setenv("KAFKA_TOPIC_REPLICATION_FACTOR", str(REPLICAS))
    monkeypatch.setenv("KAFKA_TOPIC_PARTITIONS", str(PARTITIONS))
    monkeypatch.setenv("KAFKA_TRANSACTION_TIMEOUT_MS", str(TRANSACTION_TIMEOUT_MS))
    monkeypatch.delenv("LAKEHOUSE_SCHEMAS_TOPIC", raising=False)  # where the producer writes
    monkeypatch.delenv("FLOW_SCHEMAS_TOPIC", raising=False)
    return kafka_cluster


def new_flow(source_rows: int) -> RowsFlow:
    """A flow with a function name and topic of its own."""
    tag = uuid.uuid4().hex[:8]
    return RowsFlow(f"brokers_{tag}", f"t_brokers_{tag}", source_rows)


def run(flow: RowsFlow, load: str) -> RunResult:
    """One run of ``flow``; a failed run's result (RunFailed) is returned, not raised."""
    try:
        return asyncio.run(flow.run(load))
    except RunFailed as failed:
        return failed.result


def transaction_coordinator(layout: ClusterLayout, transactional_id: str) -> int:
    """The node leading the ``__transaction_state`` partition of ``transactional_id``.

    Kafka's ``partitionFor``: ``abs(transactionalId.hashCode()) % partitions``.
    """
    props = cluster.properties(layout, layout.node(1))
    partitions = int(props["transaction.state.log.num.partitions"])
    partition = abs(_java_hash(transactional_id)) % partitions
    return cluster.leader(layout, "__transaction_state", partition)


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode()``: 32-bit, over UTF-16 code units."""
    code, data = 0, text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        code = (31 * code + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    signed = code - (1 << 32) if code >= 1 << 31 else code
    return 0 if signed == -(1 << 31) else signed  # Kafka's Utils.abs maps MIN_VALUE to 0


def led_by(layout: ClusterLayout, topic: str, node_id: int) -> list[int]:
    """The partitions of ``topic`` that ``node_id`` leads now."""
    return [p for p in range(PARTITIONS) if cluster.leader(layout, topic, p) == node_id]


def kafka_hashes(layout: ClusterLayout, topic: str) -> Counter:
    """Row hashes of every committed row of ``topic`` (what a read_committed reader sees)."""
    return row_hashes((v["ID"], v["NAME"], v["V"]) for v in decoded_values(layout.bootstrap, topic))


def delta_hashes(spark: Any, lake: Path) -> Counter:
    """Row hashes of every row of the flow's Delta table."""
    table = spark.read.format("delta").load(str(lake / NAMESPACE / TABLE))
    return row_hashes(tuple(r) for r in table.select("ID", "NAME", "V").collect())


def difference(expected: Counter, actual: Counter) -> str:
    """Rows lost and rows duplicated, counted, for an assertion message."""
    lost = sum((expected - actual).values())
    extra = sum((actual - expected).values())
    return f"{lost} rows lost, {extra} rows extra (of {sum(expected.values())})"
