"""Resolve writer schemas: by fingerprint from ``_flow_schemas``, by id from a Schema Registry.

The catalog topic ``_flow_schemas`` (compacted, 1 partition; layout in ``docs/WIRE.md``) is
read on the driver with a plain consumer from the start to its end, and again only when a
batch shows a fingerprint the cache does not know. A fingerprint it does not hold is then
looked up in the catalog's old topic, ``_schemas``, where producers wrote before the rename:
records of ours found there still resolve, and the records of a Schema Registry (whose own
store ``_schemas`` is) are skipped. Registry ids are fetched once each.

Key schemas (:meth:`SchemaCatalog.key_schemas`) are the ``"kind": "key"`` records of a topic in
the catalog topics, and with a registry every version of the subject ``<topic>-key``.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from lakehouse_writer.errors import DecodeError
from lakehouse_writer.keys import KeySchemaRef
from producer_lib.errors import SchemaError
from producer_lib.schema.catalog_records import is_registry_key, parse_record
from producer_lib.schema.framing import confluent_header, single_object_header

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 30.0
SCHEMAS_TOPIC = "_flow_schemas"
LEGACY_SCHEMAS_TOPIC = "_schemas"  # the catalog's old name; Confluent Schema Registry's store


@dataclass(frozen=True)
class CatalogEntry:
    """A writer schema: its Avro JSON text and, from the catalog topic, what it is for."""

    schema_json: str
    kind: str | None = None
    topic: str | None = None


class SchemaCatalog:
    """Schemas by single-object fingerprint (hex) and by Confluent registry id.

    Args:
        kafka_conf: librdkafka settings (``bootstrap.servers``, security ...).
        schemas_topic: The catalog topic, ``_flow_schemas`` by default.
        registry_url: Schema Registry URL, or None when only single-object framing is used.
        legacy_topic: The catalog's old topic, read for fingerprints the catalog topic does
            not hold (``_schemas``; None: none).
    """

    def __init__(
        self,
        kafka_conf: dict[str, str],
        schemas_topic: str = SCHEMAS_TOPIC,
        registry_url: str | None = None,
        legacy_topic: str | None = LEGACY_SCHEMAS_TOPIC,
    ) -> None:
        self._kafka_conf = kafka_conf
        self._topic = schemas_topic
        self._legacy = legacy_topic if legacy_topic and legacy_topic != schemas_topic else None
        self._registry_url = registry_url
        self._by_fingerprint: dict[str, CatalogEntry] = {}
        self._legacy_entries: dict[str, CatalogEntry] = {}
        self._by_id: dict[int, CatalogEntry] = {}
        self._next_offset: dict[str, int] = {}
        self._registry_records: dict[str, int] = {}  # topic -> registry records skipped
        self._registry_keys: dict[str, list[KeySchemaRef]] = {}  # topic -> its key versions
        self._keys_by_topic: dict[str, list[KeySchemaRef]] | None = None  # of the topics read

    def by_fingerprint(self, fingerprints: set[str]) -> dict[str, CatalogEntry]:
        """Entries of the given fingerprints (hex); unknown ones are absent from the result."""
        if not fingerprints <= self._known():
            self.refresh()
        if self._legacy is not None and not fingerprints <= self._known():
            self._refresh_topic(self._legacy, self._legacy_entries)
        found = {fp: self._legacy_entries[fp] for fp in fingerprints if fp in self._legacy_entries}
        found.update(
            {fp: self._by_fingerprint[fp] for fp in fingerprints if fp in self._by_fingerprint}
        )
        return found

    def _known(self) -> set[str]:
        return self._by_fingerprint.keys() | self._legacy_entries.keys()

    def by_id(self, ids: set[int]) -> dict[int, CatalogEntry]:
        """Entries of the given registry ids; unknown (or no registry) ones are absent."""
        for schema_id in ids - self._by_id.keys():
            entry = self._fetch_registry(schema_id)
            if entry is not None:
                self._by_id[schema_id] = entry
                self._registry_keys.clear()  # a new value schema may come with a new key
        return {i: self._by_id[i] for i in ids if i in self._by_id}

    def key_schemas(self, topic: str | None) -> list[KeySchemaRef]:
        """The key writer schemas of ``topic`` the catalog holds (no read of the topics).

        The ``"kind": "key"`` records of the topic in the catalog topic and its old one, as
        last read (a value schema's key is registered before it, so a batch whose value
        schemas are known finds their keys), and with a registry every version of the
        subject ``<topic>-key`` (fetched once per topic).
        """
        if not topic:
            return []
        if self._keys_by_topic is None:
            self._keys_by_topic = self._index_keys()
        return self._keys_by_topic.get(topic, []) + self._registry_key_schemas(topic)

    def _index_keys(self) -> dict[str, list[KeySchemaRef]]:
        """The key records of both catalog topics by the topic they are for."""
        index: dict[str, list[KeySchemaRef]] = {}
        for entries in (self._by_fingerprint, self._legacy_entries):
            for fingerprint, entry in entries.items():
                if entry.kind != "key" or not entry.topic:
                    continue
                try:
                    header = single_object_header(bytes.fromhex(fingerprint))
                except (ValueError, SchemaError):
                    continue  # a bad record: keys framed with it are unknown (rejected)
                index.setdefault(entry.topic, []).append(KeySchemaRef(header, entry.schema_json))
        return index

    def _registry_key_schemas(self, topic: str) -> list[KeySchemaRef]:
        if not self._registry_url:
            return []
        if topic not in self._registry_keys:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            client, subject, found = (
                SchemaRegistryClient({"url": self._registry_url}),
                f"{topic}-key",
                [],
            )
            try:
                for version in client.get_versions(subject):
                    registered = client.get_version(subject, version)
                    header = confluent_header(registered.schema_id)
                    found.append(KeySchemaRef(header, registered.schema.schema_str))
            except Exception as exc:  # noqa: BLE001 - the registry's own errors vary by version
                log.warning("registry key lookup failed subject=%s error=%s", subject, exc)
                return []  # asked again with the next batch
            self._registry_keys[topic] = found
        return self._registry_keys[topic]

    def latest_value_schemas(self) -> list[tuple[str, CatalogEntry]]:
        """(fingerprint, entry) of each topic's latest value schema in the catalog topic.

        The topic whose schema was registered last comes first. Read once, then from memory:
        what a cold start expects its first batch to hold. The old topic is not consulted.
        """
        if self._topic not in self._next_offset:
            self.refresh()
        latest: dict[str | None, tuple[str, CatalogEntry]] = {}
        for fingerprint, entry in self._by_fingerprint.items():  # in the order registered
            if entry.kind == "value" and entry.topic:
                latest.pop(entry.topic, None)
                latest[entry.topic] = (fingerprint, entry)
        return list(reversed(latest.values()))

    def value_schema_counts(self) -> dict[str, int]:
        """How many value schemas the catalog topic holds per topic (as last read; no read)."""
        counts: dict[str, int] = {}
        for entry in self._by_fingerprint.values():
            if entry.kind == "value" and entry.topic:
                counts[entry.topic] = counts.get(entry.topic, 0) + 1
        return counts

    def refresh(self) -> None:
        """Read the catalog topic from where the last refresh stopped to its current end."""
        self._refresh_topic(self._topic, self._by_fingerprint)

    def _refresh_topic(self, topic: str, into: dict[str, CatalogEntry]) -> None:
        consumer = Consumer(
            {
                **self._kafka_conf,
                "group.id": f"lakehouse-writer-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        try:
            self._read(consumer, topic, into)
        finally:
            consumer.close()
        log.info("schema catalog refreshed topic=%s schemas=%d", topic, len(into))
        if self._registry_records.get(topic):
            log.info(
                "schema catalog topic holds Schema Registry records; skipped topic=%s records=%d",
                topic,
                self._registry_records[topic],
            )

    def _read(self, consumer: Consumer, topic: str, into: dict[str, CatalogEntry]) -> None:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            if topic == self._topic:
                log.warning("schema catalog topic missing topic=%s", topic)
            self._next_offset.setdefault(topic, 0)
            return
        start = self._next_offset.get(topic, 0)
        self._next_offset[topic] = start
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high <= start:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while self._next_offset[topic] < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise DecodeError(f"cannot read the schema catalog: {msg.error()}", topic=topic)
            self._next_offset[topic] = msg.offset() + 1
            self._add(msg, into)

    def _add(self, msg: Message, into: dict[str, CatalogEntry]) -> None:
        topic = msg.topic() or ""
        if is_registry_key(msg.key()):
            self._registry_records[topic] = self._registry_records.get(topic, 0) + 1
            return
        try:
            record = parse_record(msg.value())
        except ValueError as exc:
            log.warning(
                "bad schema catalog record topic=%s offset=%d error=%s", topic, msg.offset(), exc
            )
            return
        into.pop(record.fingerprint, None)  # keep the order of the latest records
        self._keys_by_topic = None  # indexed again when next asked
        into[record.fingerprint] = CatalogEntry(record.schema_json, record.kind, record.topic)

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
