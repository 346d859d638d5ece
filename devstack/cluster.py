"""A three-broker Kafka cluster on loopback: three KRaft nodes, each broker and controller.

What a production cluster looks like to a client, small enough for one machine: a controller
quorum of three, data and internal topics with three replicas of which two must be in sync
(``min.insync.replicas=2``), so one node may die without losing a committed row or stopping
writers. It runs beside the single devstack broker, from the same Maven jars, in
``<devstack home>/kafka-cluster`` on ports of its own (:class:`ClusterLayout`).

From Python (a test fixture kills and restarts nodes)::

    layout = cluster.up(ClusterLayout.default())  # idempotent; waits until it takes transactions
    cluster.kill(layout, 2)                       # SIGKILL node 2, as a lost machine
    cluster.start(layout, 2)                      # back on its ports and data
    cluster.wait_in_sync(layout)                  # every replica caught up again
    cluster.down(layout)
"""

from __future__ import annotations

import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from devstack import broker, jars, paths, process, tools
from devstack.errors import DevstackError

log = logging.getLogger(__name__)

DEFAULT_BASE_PORT = 19192  # clients 19192-19194, controllers 19195-19197: clear of 19092-19095
SIZE = 3
START_TIMEOUT_S = 120.0  # three JVMs starting together on two cores
SYNC_TIMEOUT_S = 120.0
_HEAP = ("-Xms128m", "-Xmx512m")  # three nodes beside Spark on a 2-core machine

# Replicated like production: three copies, two of them in sync before a write counts, so
# a single lost node neither loses an acknowledged row nor stops producers.
_REPLICATED = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "5",  # default 50: slow first group join, no gain here
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "broker.heartbeat.interval.ms": "1000",  # default 2 s
    "broker.session.timeout.ms": "4000",  # default 9 s: a lost node's leaders move sooner
    "unclean.leader.election.enable": "false",  # a stale replica must never lead: rows lost
    "auto.create.topics.enable": "false",  # producers must create topics on purpose
    "group.initial.rebalance.delay.ms": "0",  # tests join groups often; do not wait 3 s each
    "num.partitions": "1",
    "log.segment.bytes": str(256 * 1024 * 1024),
}


@dataclass(frozen=True)
class NodeLayout(broker.BrokerLayout):
    """One node of the cluster: a :class:`~devstack.broker.BrokerLayout` with its identity."""

    node_id: int
    controller_port: int


@dataclass(frozen=True)
class ClusterLayout:
    """Folder and ports of the cluster.

    Node ``n`` (1..size) listens for clients on ``base_port + n - 1`` and for controllers on
    ``base_port + size + n - 1``; its files are in ``root/node<n>``.
    """

    root: Path
    base_port: int
    size: int = SIZE

    @classmethod
    def default(cls) -> ClusterLayout:
        """``<devstack home>/kafka-cluster``, base port ``DEVSTACK_CLUSTER_PORT`` or 19192."""
        port = int(os.environ.get("DEVSTACK_CLUSTER_PORT", DEFAULT_BASE_PORT))
        return cls(root=paths.home() / "kafka-cluster", base_port=port)

    def node(self, node_id: int) -> NodeLayout:
        """The layout of node ``node_id`` (1..size)."""
        if not 1 <= node_id <= self.size:
            raise DevstackError(f"no node {node_id}: the cluster has nodes 1..{self.size}")
        return NodeLayout(
            root=self.root / f"node{node_id}",
            port=self.base_port + node_id - 1,
            node_id=node_id,
            controller_port=self.base_port + self.size + node_id - 1,
        )

    @property
    def nodes(self) -> list[NodeLayout]:
        """Every node, by id."""
        return [self.node(n) for n in range(1, self.size + 1)]

    @property
    def ports(self) -> list[int]:
        """Every port the cluster listens on."""
        return list(range(self.base_port, self.base_port + 2 * self.size))

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value: every node."""
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: every node is a voter."""
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)

    @property
    def cluster_id_file(self) -> Path:
        """The cluster id every node's storage is formatted with."""
        return self.root / "cluster.id"


def properties(layout: ClusterLayout, node: NodeLayout) -> dict[str, str]:
    """Return the configuration of ``node``."""
    identity = broker.node_properties(node, node.node_id, node.controller_port, layout.voters)
    return {**identity, **_REPLICATED}


def status(layout: ClusterLayout | None = None) -> dict[int, int | None]:
    """The pid of each node (None: not running), by node id."""
    layout = layout or ClusterLayout.default()
    return {n.node_id: process.running_pid(n.pid_file, str(n.config)) for n in layout.nodes}


def up(layout: ClusterLayout | None = None) -> ClusterLayout:
    """Start every node that does not run, and wait until the cluster takes transactions."""
    layout = layout or ClusterLayout.default()
    pids = status(layout)
    stopped = [n for n in layout.nodes if pids[n.node_id] is None]
    process.ensure_ports_free(
        [p for n in stopped for p in (n.port, n.controller_port)], env_var="DEVSTACK_CLUSTER_PORT"
    )
    for node in stopped:
        _launch(layout, node)
    try:
        _wait_until_ready(layout, START_TIMEOUT_S)
    except DevstackError:
        for node in stopped:  # only what this call started
            stop(layout, node.node_id)
        raise
    return layout


def start(layout: ClusterLayout, node_id: int) -> None:
    """Start one node again (same ports, same data); return once it is back in the cluster."""
    node = layout.node(node_id)
    if status(layout)[node_id] is None:
        process.ensure_ports_free((node.port, node.controller_port), "DEVSTACK_CLUSTER_PORT")
        _launch(layout, node)
    process.wait_until_ready(
        partial(_check_registered, layout, node),
        partial(_running, layout, node_id),
        f"Kafka node {node_id} at {node.bootstrap}",
        node.log_file,
        START_TIMEOUT_S,
    )


def kill(layout: ClusterLayout, node_id: int) -> None:
    """SIGKILL one node, as a machine that is lost; return once the process is gone."""
    node = layout.node(node_id)
    pid = status(layout)[node_id]
    if pid is None:
        raise DevstackError(f"Kafka node {node_id} does not run; nothing to kill")
    os.kill(pid, signal.SIGKILL)
    while process.running_pid(node.pid_file, str(node.config)) is not None:
        time.sleep(0.05)
    node.pid_file.unlink(missing_ok=True)
    log.info("killed Kafka node=%d pid=%d", node_id, pid)


def stop(layout: ClusterLayout, node_id: int) -> bool:
    """Stop one node the orderly way (SIGTERM: controlled shutdown hands its leaders over)."""
    node = layout.node(node_id)
    return process.stop(node.pid_file, str(node.config))


def down(layout: ClusterLayout | None = None) -> bool:
    """Stop every node; True if one was running. Other brokers are never touched."""
    layout = layout or ClusterLayout.default()
    # All at once: stopped one by one, the last node would wait out its grace time for a
    # controller quorum that is gone.
    with ThreadPoolExecutor(layout.size) as pool:
        return any(list(pool.map(partial(stop, layout), range(1, layout.size + 1))))


def wait_in_sync(layout: ClusterLayout, timeout_s: float = SYNC_TIMEOUT_S) -> None:
    """Wait until every replica of every partition is in sync (none under-replicated).

    Raises:
        DevstackError: Replicas were still missing after ``timeout_s``.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": layout.bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    behind: list[str] = []
    while time.monotonic() < deadline:
        try:
            behind = _under_replicated(admin.list_topics(timeout=5))
        except Exception as exc:  # noqa: BLE001 - an unreachable cluster is "not yet"
            behind = [str(exc)]
        if not behind:
            return
        time.sleep(0.5)
    raise DevstackError(
        f"partitions still under-replicated after {timeout_s:.0f}s: {', '.join(behind[:10])}"
    )


def leader(layout: ClusterLayout, topic: str, partition: int = 0) -> int:
    """The node id leading ``topic``'s ``partition`` now."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": layout.bootstrap, "log_level": 0})
    metadata: Any = admin.list_topics(topic=topic, timeout=10)
    return int(metadata.topics[topic].partitions[partition].leader)


def _launch(layout: ClusterLayout, node: NodeLayout) -> None:
    java, classpath = tools.java(), jars.broker_classpath()
    node.root.mkdir(parents=True, exist_ok=True)
    broker.write_config(node, properties(layout, node))
    broker.format_storage(node, java, classpath, _cluster_id(layout))
    pid = broker.launch(node, java, classpath, _HEAP)
    log.info("started Kafka node=%d pid=%d bootstrap=%s", node.node_id, pid, node.bootstrap)


def _cluster_id(layout: ClusterLayout) -> str:
    """The one cluster id of every node, made at the first start."""
    layout.root.mkdir(parents=True, exist_ok=True)
    if not layout.cluster_id_file.is_file():
        layout.cluster_id_file.write_text(broker.new_cluster_id() + "\n")
    return layout.cluster_id_file.read_text().strip()


def _wait_until_ready(layout: ClusterLayout, timeout_s: float) -> None:
    """Every node registered, then one transaction coordinator loaded (three replicas)."""
    deadline = time.monotonic() + timeout_s
    for node in layout.nodes:
        process.wait_until_ready(
            partial(_check_registered, layout, node),
            partial(_running, layout, node.node_id),
            f"Kafka node {node.node_id} at {node.bootstrap}",
            node.log_file,
            max(deadline - time.monotonic(), 1.0),
        )
    process.wait_until_ready(
        partial(broker.warm_up_transactions, {"bootstrap.servers": layout.bootstrap}),
        lambda: all(pid is not None for pid in status(layout).values()),
        f"The Kafka cluster at {layout.bootstrap}",
        layout.nodes[0].log_file,
        max(deadline - time.monotonic(), 1.0),
    )


def _running(layout: ClusterLayout, node_id: int) -> bool:
    return status(layout)[node_id] is not None


def _check_registered(layout: ClusterLayout, node: NodeLayout) -> None:
    """Raise unless ``node`` answers and the cluster's metadata lists it as a broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 0})
    metadata: Any = admin.list_topics(timeout=2)
    if node.node_id not in metadata.brokers:
        raise DevstackError(f"node {node.node_id} is not registered yet")


def _under_replicated(metadata: Any) -> list[str]:
    return [
        f"{name}[{p.id}]"
        for name, topic in metadata.topics.items()
        for p in topic.partitions.values()
        if set(p.isrs) != set(p.replicas) or p.leader < 0
    ]
