"""Schema catalogs: where writer schemas are kept, and the header that names them.

Two implementations of :class:`SchemaCatalog` (``register(topic, kind, schema) -> header``,
and ``check_binding(topic, value_schema)``, which ``add_target`` calls first: tables are keyed
by schema name, so two topics whose value schemas share a name feed one table and must not
give a column types Delta cannot merge):

- :class:`EmbeddedCatalog`, the default: writes each schema to the compacted topic
  ``_flow_schemas`` (``FLOW_SCHEMAS_TOPIC``; ``docs/WIRE.md``) outside any transaction and
  returns the 10-byte Avro single-object header (``0xC3 0x01`` + CRC-64-AVRO fingerprint).
  It still reads the old catalog topic ``_schemas``, and never writes to a topic that holds
  Schema Registry records (``_schemas`` is Confluent Schema Registry's own store).
- :class:`ConfluentSchemaRegistry`, when ``SCHEMA_REGISTRY_URL`` is set: registers under the
  subjects ``<topic>-key`` / ``<topic>-value`` and returns the 5-byte Confluent header.

Quickstart::

    catalog = catalog_from_settings(KafkaSettings(), SchemaRegistrySettings())
    header = catalog.register("SAMPLE_PLAN", "value", value_schema.to_avro_json())
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from producer_lib.errors import ConfigError, ProduceError, SchemaError
from producer_lib.kafka.bindings import TableBindings
from producer_lib.kafka.catalog_topic import CatalogContents, RegistryStoreError, read_catalog
from producer_lib.kafka.topics import (
    COMPACTED,
    LEGACY_SCHEMAS_TOPIC,
    SCHEMAS_TOPIC,
    SCHEMAS_TOPIC_ENV,
    ensure_topic,
    schemas_topic,
)
from producer_lib.schema.catalog_records import CatalogRecord, encode_record
from producer_lib.schema.framing import confluent_header, schema_fingerprint, single_object_header
from producer_lib.schema.value_schema import ValueSchema
from producer_lib.settings import KafkaSettings, SchemaRegistrySettings

__all__ = [
    "ConfluentSchemaRegistry",
    "EmbeddedCatalog",
    "RegistryStoreError",
    "SchemaCatalog",
    "SchemaKind",
    "catalog_from_settings",
]

log = logging.getLogger(__name__)

SchemaKind = Literal["key", "value"]
_CATALOG_PRODUCER = {
    "enable.idempotence": True,  # a retried send must not duplicate a schema record
    "acks": "all",  # a schema must be durable before rows that need it are sent
    "linger.ms": 0,  # a handful of records, each awaited: do not wait to batch
}


class SchemaCatalog(Protocol):
    """Keeps writer schemas and names them in a message header."""

    def register(self, topic: str, kind: SchemaKind, schema_json: dict[str, Any] | str) -> bytes:
        """Store the schema of ``topic``'s keys or values; return the framing header."""
        ...

    def check_binding(
        self, topic: str, value_schema: ValueSchema, logger: logging.Logger | None = None
    ) -> None:
        """Refuse ``topic`` if another topic feeds the same table with clashing column types."""
        ...


def _as_dict(schema_json: dict[str, Any] | str) -> dict[str, Any]:
    loaded = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    if not isinstance(loaded, dict):
        raise SchemaError("a schema to register must be an Avro record (a JSON object)")
    return loaded


def _check_kind(kind: str, topic: str) -> None:
    if kind not in ("key", "value"):
        raise SchemaError("schema kind must be 'key' or 'value'", topic=topic, kind=kind)


class EmbeddedCatalog:
    """Schemas on the compacted topic ``_flow_schemas``; single-object headers.

    Before its first write it reads the catalog topic, and the old one (``_schemas``) for
    schemas registered before the rename: what they hold tells which topic feeds which table
    (:meth:`check_binding`) and which schemas need not be written again. A catalog topic
    that holds Schema Registry records is a registry's own store: it is refused, never
    written.

    Args:
        kafka_settings: The cluster to write to.
        topic: The catalog topic (default: ``FLOW_SCHEMAS_TOPIC``, else ``_flow_schemas``).
        legacy_topic: The old catalog topic, read and never written (None: none).
    """

    def __init__(
        self,
        kafka_settings: KafkaSettings,
        topic: str | None = None,
        *,
        legacy_topic: str | None = LEGACY_SCHEMAS_TOPIC,
    ) -> None:
        self._settings = kafka_settings
        self._topic = topic or schemas_topic()
        self._legacy = legacy_topic if legacy_topic and legacy_topic != self._topic else None
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._bindings = TableBindings()
        self._written: set[tuple[str, str]] = set()  # (fingerprint hex, subject)

    @property
    def topic(self) -> str:
        """The catalog topic written to."""
        return self._topic

    def register(self, topic: str, kind: SchemaKind, schema_json: dict[str, Any] | str) -> bytes:
        """Write the schema to the catalog topic (unless there already) and return its header.

        Raises:
            SchemaError: The schema is not valid Avro.
            ProduceError: The catalog topic cannot be created, read or written, or it is a
                Schema Registry's store (:class:`RegistryStoreError`).
        """
        _check_kind(kind, topic)
        schema = _as_dict(schema_json)
        fingerprint = schema_fingerprint(schema).hex()
        subject = f"{topic}-{kind}"
        self._open()
        if (fingerprint, subject) not in self._written:
            self._write(fingerprint, topic, kind, schema)
            self._written.add((fingerprint, subject))
        self._bindings.add(CatalogRecord(fingerprint, schema, topic, kind, subject))
        return single_object_header(bytes.fromhex(fingerprint))

    def check_binding(
        self, topic: str, value_schema: ValueSchema, logger: logging.Logger | None = None
    ) -> None:
        """Refuse ``topic`` when another topic feeds the same table with clashing types.

        Tables are keyed by schema name (``namespace.name``), not by topic. When another
        existing topic's latest value schema in the catalog has the same name, a column of
        the same name must have Delta types that merge (equal, or one widens to the other);
        if so a warning is logged, else this raises.

        Raises:
            SchemaError: The other topic, the column and both types are named.
            ProduceError: The catalog or the topic list cannot be read.
        """
        self._open()
        table = f"{value_schema.namespace}.{value_schema.name}"
        if any(other != topic for other in self._bindings.topics_of(table)):  # else no I/O
            self._bindings.check(topic, value_schema, self._existing_topics(), logger)

    def close(self) -> None:
        """Close its Kafka producer (each write was flushed); a later use opens a new one.

        Closed here rather than left to the garbage collector: a traceback that holds the
        catalog (a failed run's) would keep the client retrying a broker that is gone.
        """
        producer, self._producer, self._admin = self._producer, None, None
        if producer is not None:
            producer.close()

    def _open(self) -> None:
        if self._producer is not None:
            return
        conf = self._settings.to_librdkafka()
        admin = AdminClient(conf)
        timeout_s = self._settings.connect_timeout_s
        ensure_topic(
            admin,
            self._topic,
            1,
            config=COMPACTED,  # a record per fingerprint
            replication_factor=self._settings.topic_replication_factor,
            timeout_s=timeout_s,
        )
        if self._legacy is not None:
            self._load_legacy(read_catalog(conf, self._legacy, timeout_s))
        self._load_own(read_catalog(conf, self._topic, timeout_s))
        self._admin = admin
        self._producer = Producer({**conf, **_CATALOG_PRODUCER})

    def _load_own(self, contents: CatalogContents | None) -> None:
        if contents is None:
            return
        if contents.registry_key is not None:
            raise RegistryStoreError(
                f"the schema catalog topic {self._topic} holds Schema Registry records (key "
                f"{contents.registry_key[:120].decode(errors='replace')}): it is a schema "
                "registry's own store (kafkastore.topic), and flow schemas written there would "
                f"corrupt it. Set {SCHEMAS_TOPIC_ENV} to another topic (default "
                f"{SCHEMAS_TOPIC}), or set SCHEMA_REGISTRY_URL to use that registry",
                topic=self._topic,
                offset=contents.registry_offset,
            )
        latest: dict[str, str | None] = {}
        for record in contents.records:
            self._bindings.add(record)
            latest[record.fingerprint] = record.subject
        self._written = {(fp, subject) for fp, subject in latest.items() if subject}

    def _load_legacy(self, contents: CatalogContents | None) -> None:
        if contents is None:
            return
        for record in contents.records:
            self._bindings.add(record)
        if contents.registry_key is not None:
            log.info(
                "old catalog topic holds Schema Registry records; only ours are read topic=%s "
                "ours=%d",
                self._legacy,
                len(contents.records),
            )

    def _existing_topics(self) -> set[str]:
        assert self._admin is not None
        try:
            metadata: Any = self._admin.list_topics(timeout=self._settings.connect_timeout_s)
        except KafkaException as exc:
            raise ProduceError(
                f"cannot list topics: {exc.args[0]}; is the cluster reachable?"
            ) from exc
        return set(metadata.topics)

    def _write(self, fp: str, topic: str, kind: str, schema: dict[str, Any]) -> None:
        key, value = encode_record(fp, topic, kind, schema)
        subject = f"{topic}-{kind}"
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        assert self._producer is not None
        self._producer.produce(self._topic, key=key, value=value, on_delivery=delivered)
        remaining = self._producer.flush(self._settings.connect_timeout_s)
        if errors or remaining:
            reason = errors[0] if errors else "timed out"
            raise ProduceError(
                f"cannot write schema to {self._topic}: {reason}",
                topic=topic,
                subject=subject,
                fingerprint=fp,
            )
        log.info("schema registered catalog=%s subject=%s fingerprint=%s", self._topic, subject, fp)


class ConfluentSchemaRegistry:
    """Schemas in a Confluent-compatible registry; 5-byte Confluent headers.

    Args:
        settings: The registry's URL and credentials.
        client: A ready ``SchemaRegistryClient`` (else one is made from ``settings``).
    """

    def __init__(self, settings: SchemaRegistrySettings, client: Any = None) -> None:
        self._url = settings.url
        self._client = client or _registry_client(settings)
        self._ids: dict[tuple[str, str], int] = {}

    def register(self, topic: str, kind: SchemaKind, schema_json: dict[str, Any] | str) -> bytes:
        """Register under ``<topic>-<kind>`` and return the Confluent header.

        Raises:
            SchemaError: The registry rejects the schema (e.g. incompatible).
            ProduceError: The registry cannot be reached.
        """
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        _check_kind(kind, topic)
        text = json.dumps(_as_dict(schema_json), ensure_ascii=False, sort_keys=True)
        subject = f"{topic}-{kind}"
        if (subject, text) not in self._ids:
            try:
                schema_id = self._client.register_schema(subject, Schema(text, "AVRO"))
            except SchemaRegistryError as exc:
                raise SchemaError(
                    f"schema registry rejected the schema: {exc}",
                    subject=subject,
                    registry=self._url,
                ) from exc
            except Exception as exc:
                raise ProduceError(
                    f"cannot reach the schema registry: {exc}", subject=subject, registry=self._url
                ) from exc
            self._ids[(subject, text)] = schema_id
            log.info(
                "schema registered registry=%s subject=%s id=%d", self._url, subject, schema_id
            )
        return confluent_header(self._ids[(subject, text)])

    def check_binding(
        self, topic: str, value_schema: ValueSchema, logger: logging.Logger | None = None
    ) -> None:
        """Nothing: a registry keeps subjects by topic and cannot be searched by record name.

        Listing every subject's latest schema would cost a request per subject on every
        start; the writer still stops a table whose topics clash, with a clear error.
        """
        log.debug("table binding not checked against a registry topic=%s", topic)


def _registry_client(settings: SchemaRegistrySettings) -> Any:
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:
        raise ConfigError(
            f"SCHEMA_REGISTRY_URL is set but the registry client cannot load ({exc}); install "
            "confluent-kafka[schemaregistry]",
            registry=settings.url,
        ) from exc
    return SchemaRegistryClient(settings.to_client_config())


def catalog_from_settings(
    kafka_settings: KafkaSettings, registry_settings: SchemaRegistrySettings | None = None
) -> SchemaCatalog:
    """The registry when ``SCHEMA_REGISTRY_URL`` is configured, else the embedded catalog."""
    registry = registry_settings if registry_settings is not None else SchemaRegistrySettings()
    if registry.configured:
        return ConfluentSchemaRegistry(registry)
    return EmbeddedCatalog(kafka_settings)
