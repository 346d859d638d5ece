"""Read an embedded catalog topic from its start to its end, on the producer side.

Used before the first write to the catalog topic (``_flow_schemas``): what it holds tells
which topic feeds which table (:mod:`producer_lib.kafka.bindings`), and whether the topic is
in fact a Schema Registry's store, which must never be written to. The old catalog topic
``_schemas`` is read the same way, its registry records skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from producer_lib.errors import ProduceError
from producer_lib.kafka.topic_reader import (
    ReadStalled,
    TopicReadError,
    consumer,
    ranges_to_end,
    read_ranges,
)
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
    contents = CatalogContents()
    try:
        with consumer(conf, purpose="flow-catalog") as client:
            ranges = ranges_to_end(client, topic, timeout_s=idle_timeout_s)
            if ranges is None:
                return None
            for messages in read_ranges(client, ranges, stall_s=idle_timeout_s):
                for msg in messages:
                    _take(msg, contents)
    except ReadStalled as exc:
        raise ProduceError(
            f"schema catalog not read to its end: nothing came for {idle_timeout_s:g} s",
            topic=topic,
            partitions=exc.context.get("left"),
        ) from exc
    except TopicReadError as exc:
        raise ProduceError(f"cannot read the schema catalog: {exc.message}", topic=topic) from exc
    return contents


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
