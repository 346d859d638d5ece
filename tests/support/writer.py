"""Helpers for the lakehouse writer tests: schemas, decoded-row DataFrames, framed messages."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastavro
from confluent_kafka import Producer

from producer_lib.schema import (
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    KeySchema,
    ValueSchema,
    schema_fingerprint,
    single_object_header,
)
from producer_lib.schema.value_schema import TECHNICAL_FIELDS

T0 = 1_700_000_000_000_000  # µs; transaction times in tests are T0 + n


def sample_schema(name: str = "ORDERS", namespace: str = "SHOP", keyed: bool = True) -> ValueSchema:
    """A small table: ID (key), NAME, REGION, AMOUNT, with governance metadata."""
    schema = ValueSchema(name, namespace, doc="orders of the shop")
    schema.add_field("ID", AvroLong(), doc="order id", nullable=False)
    schema.add_field("NAME", AvroNVarchar(40), doc="customer name")
    schema.add_field("REGION", AvroNVarchar(10))
    schema.add_field("AMOUNT", AvroDecimal(10, 2))
    if keyed:
        schema.add_primary_key("ID")
    schema.set_data_product_owner_email("owner@example.com")
    return schema


def _ddl(schema: ValueSchema) -> str:
    parts = []
    for f in [*schema.fields.values(), *TECHNICAL_FIELDS]:
        kind = "BIGINT" if f.name == "__change_time" else f.type.to_spark()
        parts.append(f"`{f.name}` {kind}")
    return ", ".join([*parts, "topic STRING", "partition INT", "offset BIGINT"])


def rows_df(spark: Any, schema: ValueSchema, rows: Sequence[Mapping[str, Any]]) -> Any:
    """A DataFrame of decoded rows (as read.py yields them) from dicts.

    Each dict holds payload values by original name, ``t`` (µs offset from T0) or
    ``__change_time`` (µs), ``__change_type`` and optionally ``partition``/``offset``
    (defaults: 0 / position in the list) and the other technical fields.
    """
    from pyspark.sql import functions as F

    names = [*schema.fields, *(f.name for f in TECHNICAL_FIELDS), "topic", "partition", "offset"]
    data = []
    for i, row in enumerate(rows):
        full = dict(row)
        full.setdefault("__change_time", T0 + full.pop("t", 0))
        full.setdefault("__source_system", "TEST")
        full.setdefault("topic", "orders")
        full.setdefault("partition", 0)
        full.setdefault("offset", i)
        data.append(tuple(full.get(n) for n in names))
    df = spark.createDataFrame(data, _ddl(schema))
    return df.withColumn("__change_time", F.timestamp_micros("__change_time"))


def table_rows(spark: Any, path: str, columns: Iterable[str] = ("ID", "NAME")) -> list[tuple]:
    """The table's rows as sorted tuples of ``columns``."""
    cols = list(columns)
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).select(*cols).collect())


# -- Kafka messages ---------------------------------------------------------------------------


def avro_bytes(schema_json: dict[str, Any], row: Mapping[str, Any]) -> bytes:
    """fastavro's schemaless encoding of ``row``."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema_json), dict(row))
    return buffer.getvalue()


def framed(schema_json: dict[str, Any], row: Mapping[str, Any]) -> bytes:
    """Single-object framed Avro (0xC3 0x01 + fingerprint + body)."""
    return single_object_header(schema_fingerprint(schema_json)) + avro_bytes(schema_json, row)


def publish_schemas(bootstrap: str, topic: str, schemas_topic: str, schema: ValueSchema) -> None:
    """Write the value and key schema records of ``topic`` to ``schemas_topic`` (WIRE.md)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for kind, js in (("value", schema.to_avro_json()), ("key", KeySchema(schema).to_avro_json())):
        fp = schema_fingerprint(js).hex()
        record = {"fingerprint": fp, "schema": js, "subject": f"{topic}-{kind}", "topic": topic,
                  "kind": kind}  # fmt: skip
        producer.produce(schemas_topic, key=fp.encode(), value=json.dumps(record).encode())
    producer.flush(30)


def encode_row(schema: ValueSchema, row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) framed bytes of a change row given by original names."""
    key_schema = KeySchema(schema)
    value = {f.avro_name: row.get(f.name) for f in schema.fields.values()}
    value.update({f.name: row.get(f.name) for f in TECHNICAL_FIELDS})
    value.setdefault("__source_system", "TEST")
    if value["__source_system"] is None:
        value["__source_system"] = "TEST"
    key = {f.avro_name: row.get(f.name) for f in key_schema.fields}
    return framed(key_schema.to_avro_json(), key), framed(schema.to_avro_json(), value)


def produce_transaction(
    bootstrap: str,
    topic: str,
    schema: ValueSchema,
    rows: Sequence[Mapping[str, Any]],
    commit: bool = True,
    extra: Sequence[tuple[str, bytes | None, bytes | None]] = (),
) -> None:
    """Produce ``rows`` (plus raw ``extra`` (topic, key, value) messages) in one transaction."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for row in rows:
        key, value = encode_row(schema, row)
        producer.produce(topic, key=key, value=value, partition=row.get("partition", 0))
    for extra_topic, key, value in extra:
        producer.produce(extra_topic, key=key, value=value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


__all__ = ["AvroInt", "T0"]
