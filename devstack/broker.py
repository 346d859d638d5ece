"""A real single-node Apache Kafka broker (KRaft, combined broker+controller) on loopback.

Run from the Maven Central jars of ``pom.xml`` (profile ``broker``), configured for what the
project needs: transactions with one replica, no topic auto-creation, ports away from a
standard 9092 that may be running elsewhere.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import jars, paths, process, tools
from devstack.errors import DevstackError

log = logging.getLogger(__name__)

DEFAULT_PORT = 19092  # 9092 + 10000: never clashes with a standard broker left running
START_TIMEOUT_S = 90.0
HEAP = ("-Xms256m", "-Xmx1g")  # a test broker; 2-core / 24 GiB machines run Spark beside it

# One replica everywhere: transactions, consumer offsets and share groups refuse to work
# until their internal topics can be created with the replicas the cluster actually has.
_SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",  # default 50: slow first group join, no gain here
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "auto.create.topics.enable": "false",  # producers must create topics on purpose
    "group.initial.rebalance.delay.ms": "0",  # tests join groups often; do not wait 3 s each
    "num.partitions": "1",
    "log.segment.bytes": str(256 * 1024 * 1024),
}


@dataclass(frozen=True)
class BrokerLayout:
    """Files and ports of the devstack broker."""

    root: Path
    port: int

    @classmethod
    def default(cls) -> BrokerLayout:
        """The layout under devstack's home, port from ``DEVSTACK_KAFKA_PORT`` or 19092."""
        port = int(os.environ.get("DEVSTACK_KAFKA_PORT", DEFAULT_PORT))
        return cls(root=paths.home() / "kafka", port=port)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value of the broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        """The broker's ``server.properties``; its path marks the process as ours."""
        return self.root / "server.properties"

    @property
    def data(self) -> Path:
        """The broker's log (data) folder."""
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        """The broker's stdout/stderr and Log4j output."""
        return self.root / "broker.log"

    @property
    def pid_file(self) -> Path:
        """The pid of the running broker."""
        return self.root / "broker.pid"


def properties(layout: BrokerLayout) -> dict[str, str]:
    """Return the broker configuration for ``layout``."""
    controller = layout.port + 1
    return {**node_properties(layout, 1, controller, f"1@127.0.0.1:{controller}"), **_SINGLE_NODE}


def node_properties(
    layout: BrokerLayout, node_id: int, controller_port: int, voters: str
) -> dict[str, str]:
    """The listeners, identity and quorum of one combined broker+controller node.

    Args:
        layout: The node's folder and client port.
        node_id: Its ``node.id``.
        controller_port: Its controller listener's port.
        voters: ``controller.quorum.voters`` (``id@host:port,...``), the same on every node.
    """
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{layout.port},CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{layout.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(layout.data),
    }


def status(layout: BrokerLayout | None = None) -> int | None:
    """Return the pid of the running devstack broker, or None."""
    layout = layout or BrokerLayout.default()
    return process.running_pid(layout.pid_file, str(layout.config))


def up(layout: BrokerLayout | None = None) -> BrokerLayout:
    """Start the broker unless it runs already, and wait until it answers."""
    layout = layout or BrokerLayout.default()
    if status(layout) is not None:
        _wait_until_answering(layout, START_TIMEOUT_S)
        return layout
    process.ensure_ports_free((layout.port, layout.port + 1), env_var="DEVSTACK_KAFKA_PORT")
    java = tools.java()
    classpath = jars.broker_classpath()
    layout.root.mkdir(parents=True, exist_ok=True)
    write_config(layout, properties(layout))
    format_storage(layout, java, classpath)
    pid = launch(layout, java, classpath, HEAP)
    log.info("started Kafka broker pid=%d bootstrap=%s", pid, layout.bootstrap)
    try:
        _wait_until_answering(layout, START_TIMEOUT_S)
    except DevstackError:
        process.stop(layout.pid_file, str(layout.config))
        raise
    return layout


def down(layout: BrokerLayout | None = None) -> bool:
    """Stop the devstack broker; True if it was running. Other brokers are never touched."""
    layout = layout or BrokerLayout.default()
    return process.stop(layout.pid_file, str(layout.config))


@contextmanager
def bootstrap_servers(
    start: Callable[[Callable[[], BrokerLayout]], BrokerLayout] | None = None,
) -> Iterator[str]:
    """The Kafka to use: ``KAFKA_BOOTSTRAP_SERVERS`` when set, else the devstack broker.

    The devstack broker is reused when it runs, otherwise started here and stopped again on
    exit. ``start(up)`` may wrap the start (e.g. to print progress); default: ``up()``.
    """
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    started_here = status() is None
    layout = start(up) if start is not None else up()
    try:
        yield layout.bootstrap
    finally:
        if started_here:
            down(layout)


# -- one KRaft node: what the single broker, the secured broker and the cluster share -------


def write_config(layout: BrokerLayout, props: Mapping[str, str], secret: bool = False) -> None:
    """Write the node's ``server.properties`` and its log4j2 configuration.

    ``secret``: the properties hold passwords; the file is made readable by its owner only.
    """
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    header = "# written by devstack; edits are overwritten" + (
        "; dev passwords inside" if secret else ""
    )
    fd = os.open(layout.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(header + "\n" + text)
    (layout.root / "log4j2.properties").write_text(LOG4J2.format(log=layout.root / "server.log"))


def format_storage(
    layout: BrokerLayout,
    java: str,
    classpath: str,
    cluster_id: str | None = None,
    extra_args: Sequence[str] = (),
    secret: str | None = None,
) -> None:
    """Format the node's storage once; every node of one cluster gets the same ``cluster_id``.

    Args:
        layout: The node.
        java: The java executable.
        classpath: Kafka's jars.
        cluster_id: The cluster's id (None: a new one).
        extra_args: More arguments of ``kafka-storage format`` (``--add-scram ...``).
        secret: A password inside ``extra_args``, masked in an error message.
    """
    if (layout.data / "meta.properties").is_file():
        return
    cmd = [
        java,
        *jvm_flags(layout),
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id or new_cluster_id(),
        "-c",
        str(layout.config),
        *extra_args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        output = done.stdout + done.stderr
        output = output.replace(secret, "***") if secret else output
        raise DevstackError(f"Formatting Kafka storage in {layout.data} failed:\n{output}")


def launch(layout: BrokerLayout, java: str, classpath: str, heap: Sequence[str]) -> int:
    """Start the node's JVM in the background; its pid (the caller waits for it to answer)."""
    cmd = [java, *heap, *jvm_flags(layout), "-cp", classpath, "kafka.Kafka", str(layout.config)]
    return process.start(cmd, layout.log_file, layout.pid_file, layout.root)


def new_cluster_id() -> str:
    """A random Kafka cluster id (URL-safe base64 of a UUID), as Kafka's ``Uuid`` makes them.

    Like Kafka, never one that starts with ``-``: the storage tool would read it as an option.
    """
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


def jvm_flags(layout: BrokerLayout) -> list[str]:
    """The JVM flags of a node: G1, headless, its own log4j2 file and log folder."""
    return [
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.root / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={layout.root}",
    ]


def warm_up_transactions(client_conf: Mapping[str, Any]) -> None:
    """Make a transaction coordinator load now, not in the middle of the first real run."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **client_conf,
            "transactional.id": "devstack-warm-up",
            "log_level": 3,  # "coordinator load in progress" retries are expected here
        }
    )
    producer.init_transactions(60)


def _wait_until_answering(layout: BrokerLayout, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": layout.bootstrap, "log_level": 0})

    def probe() -> None:
        admin.list_topics(timeout=2)
        warm_up_transactions({"bootstrap.servers": layout.bootstrap})

    process.wait_until_ready(
        probe,
        lambda: status(layout) is not None,
        f"The Kafka broker at {layout.bootstrap}",
        layout.log_file,
        timeout_s,
    )


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""
