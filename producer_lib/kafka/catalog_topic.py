"""Read an embedded catalog topic from its start to its end, on the producer side.

Used before the first write to the catalog topic (``_flow_schemas``): what it holds tells
which topic feeds which table (:mod:`producer_lib.kafka.bindings`), and whether the topic is
in fact a Schema Registry's store, which must never be written to. The old catalog topic
``_schemas`` is read the same way, its registry records skipped.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from producer_lib.errors import ProduceError
from producer_lib.schema.catalog_records import CatalogRecord, is_registry_key, parse_record

__all__ = ["CatalogContents", "RegistryStoreError", "read_catalog"]

log = logging.getLogger(__name__)


class RegistryStoreError(ProduceError):
    """The catalog topic holds Schema Registry records: it is a registry's own store."""


@dataclass
class CatalogContents:
    """What a catalog topic holds, in offset order.

    Attributes:
        records: Records of ours.
        registry_key: The key of the first Schema Registry record found, if any.
        registry_offset: Its offset.
        skipped: Records that are neither ours nor a registry's.
    """

    records: list[CatalogRecord] = field(default_factory=list)
    registry_key: bytes | None = None
    registry_offset: int | None = None
    skipped: int = 0


def read_catalog(conf: dict[str, Any], topic: str, idle_timeout_s: float) -> CatalogContents | None:
    """Every record of ``topic`` up to its end as the call began; None when it does not exist.

    Args:
        conf: librdkafka settings of the cluster.
        topic: The catalog topic.
        idle_timeout_s: Give up when no record arrives for this long.

    Raises:
        ProduceError: The topic cannot be read to its end.
    """
    group = f"flow-catalog-{uuid.uuid4().hex}"  # assigned, not subscribed: never joins
    consumer = Consumer(
        {**conf, "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True}
    )
    try:
        ends = _ends(consumer, topic, idle_timeout_s)
        if ends is None:
            return None
        contents = CatalogContents()
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        _drain(consumer, topic, ends, pending, contents, idle_timeout_s)
        return contents
    except KafkaException as exc:
        raise ProduceError(f"cannot read the schema catalog: {exc.args[0]}", topic=topic) from exc
    finally:
        consumer.close()


def _ends(consumer: Consumer, topic: str, timeout_s: float) -> dict[int, int] | None:
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
        for p in meta.partitions
    }


def _drain(
    consumer: Consumer,
    topic: str,
    ends: dict[int, int],
    pending: set[int],
    contents: CatalogContents,
    idle_timeout_s: float,
) -> None:
    deadline = time.monotonic() + idle_timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise ProduceError(
                f"schema catalog not read to its end: nothing came for {idle_timeout_s:g} s",
                topic=topic,
                partitions=sorted(pending),
            )
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        deadline = time.monotonic() + idle_timeout_s
        error = msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise ProduceError(f"cannot read the schema catalog: {error}", topic=topic)
        if error is None:
            _take(msg, contents)
        offset = msg.offset() if error is None else msg.offset() - 1
        if offset is not None and offset + 1 >= ends[msg.partition()]:
            pending.discard(msg.partition())


def _take(msg: Message, contents: CatalogContents) -> None:
    key = msg.key()
    if is_registry_key(key):
        if contents.registry_key is None:
            contents.registry_key, contents.registry_offset = key, msg.offset()
        return
    try:
        contents.records.append(parse_record(msg.value()))
    except ValueError as exc:
        contents.skipped += 1
        log.warning(
            "not a schema catalog record topic=%s offset=%s error=%s",
            msg.topic(),
            msg.offset(),
            exc,
        )
