"""Resolve writer schemas: by fingerprint from ``_schemas``, by id from a Schema Registry.

The ``_schemas`` topic (compacted, 1 partition; layout in ``docs/WIRE.md``) is read on the
driver with a plain consumer from the start to its end, and again only when a batch shows a
fingerprint the cache does not know. Registry ids are fetched once each.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from lakehouse_writer.errors import DecodeError

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CatalogEntry:
    """A writer schema: its Avro JSON text and, from ``_schemas``, what it is for."""

    schema_json: str
    kind: str | None = None
    topic: str | None = None


class SchemaCatalog:
    """Schemas by single-object fingerprint (hex) and by Confluent registry id.

    Args:
        kafka_conf: librdkafka settings (``bootstrap.servers``, security ...).
        schemas_topic: The catalog topic, ``_schemas`` by default.
        registry_url: Schema Registry URL, or None when only single-object framing is used.
    """

    def __init__(
        self, kafka_conf: dict[str, str], schemas_topic: str = "_schemas",
        registry_url: str | None = None,
    ) -> None:  # fmt: skip
        self._kafka_conf = kafka_conf
        self._topic = schemas_topic
        self._registry_url = registry_url
        self._by_fingerprint: dict[str, CatalogEntry] = {}
        self._by_id: dict[int, CatalogEntry] = {}
        self._next_offset = 0

    def by_fingerprint(self, fingerprints: set[str]) -> dict[str, CatalogEntry]:
        """Entries of the given fingerprints (hex); unknown ones are absent from the result."""
        if not fingerprints <= self._by_fingerprint.keys():
            self.refresh()
        return {fp: self._by_fingerprint[fp] for fp in fingerprints if fp in self._by_fingerprint}

    def by_id(self, ids: set[int]) -> dict[int, CatalogEntry]:
        """Entries of the given registry ids; unknown (or no registry) ones are absent."""
        for schema_id in ids - self._by_id.keys():
            entry = self._fetch_registry(schema_id)
            if entry is not None:
                self._by_id[schema_id] = entry
        return {i: self._by_id[i] for i in ids if i in self._by_id}

    def latest_value_schemas(self) -> list[tuple[str, CatalogEntry]]:
        """(fingerprint, entry) of each topic's latest value schema in ``_schemas``.

        The topic whose schema was registered last comes first. Read once, then from memory:
        what a cold start expects its first batch to hold.
        """
        if not self._next_offset:
            self.refresh()
        latest: dict[str | None, tuple[str, CatalogEntry]] = {}
        for fingerprint, entry in self._by_fingerprint.items():  # in the order registered
            if entry.kind == "value" and entry.topic:
                latest.pop(entry.topic, None)
                latest[entry.topic] = (fingerprint, entry)
        return list(reversed(latest.values()))

    def value_schema_counts(self) -> dict[str, int]:
        """How many value schemas ``_schemas`` holds per topic (as last read; no read)."""
        counts: dict[str, int] = {}
        for entry in self._by_fingerprint.values():
            if entry.kind == "value" and entry.topic:
                counts[entry.topic] = counts.get(entry.topic, 0) + 1
        return counts

    def refresh(self) -> None:
        """Read ``_schemas`` from where the last refresh stopped to its current end."""
        consumer = Consumer({
            **self._kafka_conf, "group.id": f"lakehouse-writer-{uuid.uuid4()}",
            "enable.auto.commit": False, "enable.partition.eof": True,
        })  # fmt: skip
        try:
            self._read(consumer)
        finally:
            consumer.close()
        log.info("schema catalog refreshed topic=%s schemas=%d", self._topic,
                 len(self._by_fingerprint))  # fmt: skip

    def _read(self, consumer: Consumer) -> None:
        meta = consumer.list_topics(self._topic, timeout=10).topics.get(self._topic)
        if meta is None or meta.error is not None:
            log.warning("schema catalog topic missing topic=%s", self._topic)
            return
        _, high = consumer.get_watermark_offsets(TopicPartition(self._topic, 0), timeout=10)
        if high <= self._next_offset:
            return
        consumer.assign([TopicPartition(self._topic, 0, self._next_offset)])
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while self._next_offset < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise DecodeError(f"cannot read the schema catalog: {msg.error()}",
                                  topic=self._topic)  # fmt: skip
            self._next_offset = msg.offset() + 1
            self._add(msg.key(), msg.value(), msg.offset())

    def _add(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            record: dict[str, Any] = json.loads(value or b"")
            fingerprint = str(record["fingerprint"]).lower()
            schema = record["schema"]
            text = schema if isinstance(schema, str) else json.dumps(schema)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("bad schema catalog record topic=%s offset=%d error=%s", self._topic,
                        offset, exc)  # fmt: skip
            return
        self._by_fingerprint.pop(fingerprint, None)  # keep the order of the latest records
        self._by_fingerprint[fingerprint] = CatalogEntry(text, record.get("kind"),
                                                         record.get("topic"))  # fmt: skip

    def _fetch_registry(self, schema_id: int) -> CatalogEntry | None:
        if not self._registry_url:
            return None
        from confluent_kafka.schema_registry import SchemaRegistryClient

        try:
            schema = SchemaRegistryClient({"url": self._registry_url}).get_schema(schema_id)
        except Exception as exc:  # the registry's own errors vary by version
            log.warning("registry lookup failed schema_id=%d error=%s", schema_id, exc)
            return None
        return CatalogEntry(schema.schema_str)
