"""Schema catalogs: where writer schemas are kept, and the header that names them.

Two implementations of :class:`SchemaCatalog` (``register(topic, kind, schema) -> header``):

- :class:`EmbeddedCatalog`, the default: writes each schema to the compacted topic
  ``_schemas`` (``docs/WIRE.md``) outside any transaction and returns the 10-byte Avro
  single-object header (``0xC3 0x01`` + CRC-64-AVRO fingerprint).
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

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from producer_lib.errors import ConfigError, ProduceError, SchemaError
from producer_lib.kafka.topics import COMPACTED, SCHEMAS_TOPIC, ensure_topic
from producer_lib.schema.framing import confluent_header, schema_fingerprint, single_object_header
from producer_lib.settings import KafkaSettings, SchemaRegistrySettings

__all__ = [
    "ConfluentSchemaRegistry",
    "EmbeddedCatalog",
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


def _as_dict(schema_json: dict[str, Any] | str) -> dict[str, Any]:
    loaded = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    if not isinstance(loaded, dict):
        raise SchemaError("a schema to register must be an Avro record (a JSON object)")
    return loaded


def _check_kind(kind: str, topic: str) -> None:
    if kind not in ("key", "value"):
        raise SchemaError("schema kind must be 'key' or 'value'", topic=topic, kind=kind)


class EmbeddedCatalog:
    """Schemas on the compacted topic ``_schemas``; single-object headers.

    Args:
        kafka_settings: The cluster to write to.
        topic: The catalog topic (``_schemas``; other names for tests only).
    """

    def __init__(self, kafka_settings: KafkaSettings, topic: str = SCHEMAS_TOPIC) -> None:
        self._settings = kafka_settings
        self._topic = topic
        self._producer: Producer | None = None
        self._written: set[tuple[str, str]] = set()  # (fingerprint hex, subject)

    def register(self, topic: str, kind: SchemaKind, schema_json: dict[str, Any] | str) -> bytes:
        """Write the schema to ``_schemas`` (once per process) and return its header.

        Raises:
            SchemaError: The schema is not valid Avro.
            ProduceError: ``_schemas`` cannot be created or written.
        """
        _check_kind(kind, topic)
        schema = _as_dict(schema_json)
        fingerprint = schema_fingerprint(schema)
        subject = f"{topic}-{kind}"
        if (fingerprint.hex(), subject) not in self._written:
            self._write(fingerprint.hex(), subject, topic, kind, schema)
            self._written.add((fingerprint.hex(), subject))
        return single_object_header(fingerprint)

    def _write(self, fp: str, subject: str, topic: str, kind: str, schema: dict[str, Any]) -> None:
        record = {"fingerprint": fp, "schema": schema, "subject": subject, "topic": topic,
                  "kind": kind}  # fmt: skip
        value = json.dumps(record, ensure_ascii=False).encode()
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer = self._get_producer()
        producer.produce(self._topic, key=fp.encode(), value=value, on_delivery=delivered)
        remaining = producer.flush(self._settings.connect_timeout_s)
        if errors or remaining:
            reason = errors[0] if errors else "timed out"
            raise ProduceError(f"cannot write schema to {self._topic}: {reason}",
                               topic=topic, subject=subject, fingerprint=fp)  # fmt: skip
        log.info("schema registered catalog=%s subject=%s fingerprint=%s", self._topic,
                 subject, fp)  # fmt: skip

    def _get_producer(self) -> Producer:
        if self._producer is None:
            conf = self._settings.to_librdkafka()
            admin = AdminClient(conf)
            ensure_topic(admin, self._topic, 1, config=COMPACTED,  # a record per fingerprint
                         replication_factor=self._settings.topic_replication_factor,
                         timeout_s=self._settings.connect_timeout_s)  # fmt: skip
            self._producer = Producer({**conf, **_CATALOG_PRODUCER})
        return self._producer


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
                raise SchemaError(f"schema registry rejected the schema: {exc}",
                                  subject=subject, registry=self._url) from exc  # fmt: skip
            except Exception as exc:
                raise ProduceError(f"cannot reach the schema registry: {exc}",
                                   subject=subject, registry=self._url) from exc  # fmt: skip
            self._ids[(subject, text)] = schema_id
            log.info("schema registered registry=%s subject=%s id=%d", self._url, subject,
                     schema_id)  # fmt: skip
        return confluent_header(self._ids[(subject, text)])


def _registry_client(settings: SchemaRegistrySettings) -> Any:
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:
        raise ConfigError(
            f"SCHEMA_REGISTRY_URL is set but the registry client cannot load ({exc}); install "
            "confluent-kafka[schemaregistry]", registry=settings.url,
        ) from exc  # fmt: skip
    return SchemaRegistryClient(settings.to_client_config())


def catalog_from_settings(
    kafka_settings: KafkaSettings, registry_settings: SchemaRegistrySettings | None = None
) -> SchemaCatalog:
    """The registry when ``SCHEMA_REGISTRY_URL`` is configured, else the embedded catalog."""
    registry = registry_settings if registry_settings is not None else SchemaRegistrySettings()
    if registry.configured:
        return ConfluentSchemaRegistry(registry)
    return EmbeddedCatalog(kafka_settings)
