"""Records of the embedded schema catalog, and the records of a Schema Registry's store.

The embedded catalog keeps one record per writer schema on the compacted topic
``_flow_schemas`` (layout in ``docs/WIRE.md``); producer and writer build and read those
records here. Its old name, ``_schemas``, is Confluent Schema Registry's own storage topic
(``kafkastore.topic``): a registry record has a JSON key with a ``keytype``
(``{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}``, ``NOOP``,
``CONFIG`` ...), which :func:`is_registry_key` recognises so that nothing of ours is ever
written into a registry's store and its records are skipped when read.

Pure: no Kafka client here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from producer_lib.errors import SchemaError
from producer_lib.schema.names import decode_name

__all__ = ["CatalogRecord", "encode_record", "is_registry_key", "parse_record", "table_of"]


@dataclass(frozen=True)
class CatalogRecord:
    """One writer schema of the embedded catalog.

    Attributes:
        fingerprint: CRC-64-AVRO fingerprint of the schema, 16 lowercase hex characters.
        raw_schema: The Avro schema as the record holds it: a JSON object, or JSON text.
        topic: The topic whose keys or values it frames (None in hand-written records).
        kind: ``"key"`` or ``"value"`` (None in hand-written records).
        subject: ``<topic>-<kind>``.
    """

    fingerprint: str
    raw_schema: dict[str, Any] | str
    topic: str | None = None
    kind: str | None = None
    subject: str | None = None

    @property
    def schema(self) -> dict[str, Any]:
        """The Avro schema as a dict."""
        if isinstance(self.raw_schema, str):
            loaded: dict[str, Any] = json.loads(self.raw_schema)
            return loaded
        return self.raw_schema

    @property
    def schema_json(self) -> str:
        """The Avro schema as JSON text (made on each call when the record holds an object)."""
        if isinstance(self.raw_schema, str):
            return self.raw_schema
        return json.dumps(self.raw_schema)


def encode_record(
    fingerprint: str, topic: str, kind: str, schema: dict[str, Any]
) -> tuple[bytes, bytes]:
    """The key and value of a catalog record (``docs/WIRE.md``).

    Args:
        fingerprint: 16 lowercase hex characters.
        topic: The topic the schema frames.
        kind: ``"key"`` or ``"value"``.
        schema: The Avro schema.
    """
    record = {
        "fingerprint": fingerprint,
        "schema": schema,
        "subject": f"{topic}-{kind}",
        "topic": topic,
        "kind": kind,
    }
    return fingerprint.encode(), json.dumps(record, ensure_ascii=False).encode()


def parse_record(value: bytes | None) -> CatalogRecord:
    """Read a catalog record's value.

    Raises:
        ValueError: The value is not a record of ours (not JSON, or no fingerprint/schema).
    """
    try:
        record = json.loads(value or b"")
        fingerprint = str(record["fingerprint"]).lower()
        schema = record["schema"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a catalog record: {type(exc).__name__}: {exc}") from exc
    if not isinstance(schema, (dict, str)):
        raise ValueError(f"not a catalog record: the schema is a {type(schema).__name__}")
    topic, kind, subject = record.get("topic"), record.get("kind"), record.get("subject")
    return CatalogRecord(fingerprint, schema, topic, kind, subject)


def is_registry_key(key: bytes | None) -> bool:
    """True when ``key`` is the key of a Schema Registry store record (a ``keytype`` object).

    Confluent Schema Registry and Karapace key every record of their store with a JSON
    object naming its ``keytype``; the embedded catalog keys by a hex fingerprint.
    """
    if not key or not key.lstrip().startswith(b"{"):
        return False
    try:
        loaded = json.loads(key)
    except ValueError:
        return False
    return isinstance(loaded, dict) and isinstance(loaded.get("keytype"), str)


def table_of(schema: dict[str, Any]) -> str | None:
    """``<namespace>.<name>`` of the lakehouse table a value schema's rows land in.

    The original names (``sourceNamespace``/``sourceName``, else the decoded Avro names), as
    ``ValueSchema.from_avro_json`` restores them; None when the schema is not a named record.
    """
    if schema.get("type") != "record" or not isinstance(schema.get("name"), str):
        return None
    try:
        name = schema.get("sourceName") or decode_name(schema["name"])
        namespace = schema.get("sourceNamespace") or ".".join(
            decode_name(part) for part in str(schema.get("namespace", "")).split(".")
        )
    except SchemaError:
        return None
    return f"{namespace}.{name}"
