"""Create topics that do not exist yet, and read partition counts.

Brokers of this platform do not auto-create topics, so the producer creates data topics and
the system topics (``_flow_schemas``, ``_commits``) on purpose, with their configuration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from producer_lib.errors import ProduceError
from producer_lib.settings.registry import SchemaRegistrySettings

__all__ = [
    "COMMITS_TOPIC",
    "COMPACTED",
    "EXECUTION_LOG_TOPIC",
    "LEGACY_SCHEMAS_TOPIC",
    "LINEAGE_TOPIC",
    "REJECTED_ROWS_TOPIC",
    "SCHEMAS_TOPIC",
    "SCHEMAS_TOPIC_ENV",
    "CLEANUP_POLICIES",
    "align_topic_config",
    "data_topic_config",
    "ensure_topic",
    "schemas_topic",
]

log = logging.getLogger(__name__)

# Not `_schemas`: that is Confluent Schema Registry's own store (its `kafkastore.topic`).
SCHEMAS_TOPIC = "_flow_schemas"
SCHEMAS_TOPIC_ENV = "FLOW_SCHEMAS_TOPIC"  # names another catalog topic, on both sides
LEGACY_SCHEMAS_TOPIC = "_schemas"  # the catalog's old name: read for existing data, never written
COMMITS_TOPIC = "_commits"
EXECUTION_LOG_TOPIC = "_execution_log"
LINEAGE_TOPIC = "_lineage"
# Rows an expectation dropped, in the transaction of the data; the writer lands them in
# `_rejected` (docs/WIRE.md). Not compacted: every rejected row counts.
REJECTED_ROWS_TOPIC = "_rejected_rows"
COMPACTED = {"cleanup.policy": "compact"}  # system topics keyed by what they describe
# A change topic is a log of changes: "delete" (by age) keeps every change until it expires;
# "compact" would keep only the latest record per key, so a lagging writer could miss the
# DELETE between two UPSERTs of a key, or the rows a TRUNCATE applies to.
CLEANUP_POLICIES = ("delete", "compact,delete", "compact")


def schemas_topic() -> str:
    """The embedded catalog topic: ``FLOW_SCHEMAS_TOPIC`` when set, else ``_flow_schemas``."""
    return SchemaRegistrySettings().schemas_topic


def ensure_topic(
    admin: AdminClient,
    topic: str,
    partitions: int,
    *,
    replication_factor: int = -1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 15.0,
) -> int:
    """Create ``topic`` unless it exists; return its partition count.

    Args:
        admin: Admin client of the cluster.
        topic: Topic name.
        partitions: Partitions when created.
        replication_factor: Replicas when created (-1: the broker default).
        config: Topic configuration when created (e.g. ``cleanup.policy=compact``).
        timeout_s: Bound on each admin call.

    Returns:
        The topic's partition count (existing topics keep theirs).

    Raises:
        ProduceError: The cluster cannot be reached or refuses the topic.
    """
    existing = _partition_count(admin, topic, timeout_s)
    if existing is not None:
        return existing
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=dict(config or {}),
    )
    try:
        admin.create_topics([new], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
        log.info("created topic topic=%s partitions=%d", topic, partitions)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ProduceError(f"cannot create topic: {exc.args[0]}", topic=topic) from exc
        return _awaited_partition_count(admin, topic, timeout_s)  # made by another client
    except Exception as exc:
        raise ProduceError(f"cannot create topic: {exc}", topic=topic) from exc
    return _partition_count(admin, topic, timeout_s) or partitions


def _awaited_partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int:
    """The partition count of a topic that exists, once the metadata shows it.

    A topic another client has just created can be missing from the broker's metadata for a
    moment; its count is then not ours to guess (the asked count is not the topic's).

    Raises:
        ProduceError: The metadata does not show the topic within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while (count := _partition_count(admin, topic, timeout_s)) is None:
        if time.monotonic() > deadline:
            raise ProduceError(
                f"the topic exists, but the cluster's metadata did not show its partitions "
                f"within {timeout_s:g} s",
                topic=topic,
            )
        time.sleep(0.1)
    return count


def data_topic_config(
    retention: timedelta | int | None, cleanup_policy: str, default_retention_ms: int
) -> dict[str, str]:
    """``retention.ms`` and ``cleanup.policy`` of a data topic, checked.

    Args:
        retention: How long the topic keeps a record: a timedelta, milliseconds, -1 for ever,
            or None for ``default_retention_ms``.
        cleanup_policy: One of :data:`CLEANUP_POLICIES`.
        default_retention_ms: The settings' ``topic_retention_ms``.

    Raises:
        ValueError: A retention under one minute (other than -1), or an unknown policy.
    """
    if isinstance(retention, timedelta):
        retention = int(retention.total_seconds() * 1000)
    ms = default_retention_ms if retention is None else retention
    if isinstance(ms, bool) or not isinstance(ms, int) or (ms != -1 and ms < 60_000):
        raise ValueError(
            f"retention must be at least one minute, or -1 to keep records for ever: {retention!r}"
        )
    if cleanup_policy not in CLEANUP_POLICIES:
        raise ValueError(f"cleanup_policy must be one of {', '.join(CLEANUP_POLICIES)}")
    return {"retention.ms": str(ms), "cleanup.policy": cleanup_policy}


def align_topic_config(
    admin: AdminClient, topic: str, wanted: Mapping[str, str], timeout_s: float = 15.0
) -> dict[str, str]:
    """Set the ``wanted`` configuration on an existing topic where it differs.

    Returns:
        The settings changed, with their new values (empty when all matched).

    Raises:
        ProduceError: The configuration cannot be read or changed (an ACL without
            ALTER_CONFIGS on the topic, say); names the topic and the settings.
    """
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        current = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        raise ProduceError(
            f"cannot read the topic's configuration: {exc.args[0]}", topic=topic
        ) from exc
    changed = {k: v for k, v in wanted.items() if k not in current or current[k].value != v}
    if not changed:
        return {}
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changed.items()
    ]
    try:
        admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)]
        )[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        raise ProduceError(
            f"cannot change the topic's configuration ({changed}): {exc.args[0]}",
            topic=topic,
        ) from exc
    log.info("topic configuration changed topic=%s changed=%s", topic, changed)
    return changed


def _partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int | None:
    try:
        metadata: Any = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as exc:
        raise ProduceError(
            f"cannot read topic metadata: {exc.args[0]}; is the cluster reachable?", topic=topic
        ) from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)
