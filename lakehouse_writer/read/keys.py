"""Kafka message keys: decoded on the JVM and checked against the key fields of the value.

A data message's key is the Avro record of its table's primary-key fields in key order, framed
like the value (``docs/WIRE.md``); an append-only table's key holds only the transaction time,
``__change_time``. The writer applies the value, so a key that disagrees with it means the
message was not written by a producer that keeps to the wire format (or was altered): Kafka
partitioned and compacted it by one identity, the lakehouse would store another. Such a row is
rejected to ``_rejected``, with the reason; the batch's other rows apply.

:func:`key_problem` is one Spark expression per value schema: null when the row's key agrees,
else the reason, naming the table, the key field, both values and where the row was read
(topic, partition, offset). It decodes the key with ``from_avro`` in the projection that
decodes the value, so checking keys adds no Spark job. Rules, for every row type:

- a table with a primary key: the key must be there, be framed, have a writer schema the
  writer knows (:class:`KeySchemaRef` candidates), hold exactly the primary-key fields in key
  order with the types of the value's fields, decode, and every field must equal the value's
  field (null-safe). TRUNCATE rows are no exception: the producer frames the placeholder key
  fields of the TRUNCATE's value (``create_key_row``), and checking them costs nothing.
  DELETE, EXTERMINATE and GDPR rows carry only their key fields besides the technical ones,
  and those key fields are what is checked; a BEFORE image's key is its old key.
- an append-only table: no key is accepted (nothing of the key is applied); a key that is
  there must decode and its ``__change_time`` must equal the value's ``__change_time``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse_writer.read.framing import avro_struct, body_column, header_column, header_length
from producer_lib.errors import SchemaError
from producer_lib.schema import KeySchema, ValueSchema, schema_fingerprint, single_object_header
from producer_lib.schema.types import AvroField
from producer_lib.schema.value_schema import TECHNICAL_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CHANGE_TIME = "__change_time"
KEY_HEADER = "__kheader"
_SHOWN = 100  # characters of a key or value shown in a reason
_TECHNICAL = {f.name: f for f in TECHNICAL_FIELDS}


@dataclass(frozen=True)
class KeySchemaRef:
    """A key writer schema a row's key may be framed with.

    Attributes:
        header: The key's header bytes (``0x00`` + id, or ``0xC3 0x01`` + fingerprint).
        schema_json: The key's Avro schema JSON text.
    """

    header: bytes
    schema_json: str


def own_key(schema: ValueSchema) -> KeySchemaRef | None:
    """The single-object key schema this project's producer writes with ``schema``.

    :class:`~producer_lib.schema.KeySchema` of the value schema, as ``add_target`` registers
    it; known without reading the catalog. None when it cannot be built.
    """
    try:
        key_json = KeySchema(schema).to_avro_json()
        header = single_object_header(schema_fingerprint(key_json))
    except SchemaError:
        return None
    return KeySchemaRef(header, json.dumps(key_json))


def candidates(schema: ValueSchema, found: Sequence[KeySchemaRef]) -> tuple[KeySchemaRef, ...]:
    """:func:`own_key` of ``schema`` and ``found``, each header once (the first wins)."""
    own = own_key(schema)
    out: dict[bytes, KeySchemaRef] = {}
    for ref in (own, *found) if own is not None else found:
        out.setdefault(bytes(ref.header), ref)
    return tuple(out.values())


def key_problem(
    value: Column,
    schema: ValueSchema,
    keys: Sequence[tuple[KeySchemaRef, Column]],
    located: bool = True,
) -> Column:
    """Null where the row's key agrees with its decoded ``value``; else why not (see above).

    Args:
        value: The decoded value struct (Avro field names); rows whose value did not decode
            (null, or no change type) give null: they are rejected for their body.
        schema: Its value schema.
        keys: The key writer schemas the rows' keys may have, each with the key decoded
            with it (:func:`decoded_key`; null where the key has another header).
        located: End the reason with where the row was read; False where only whether
            there is one matters (spares every row the text of its position).

    Reads the columns ``key``, ``topic``, ``partition`` and ``offset`` of the frame.
    """
    from pyspark.sql import functions as F

    table = _table(schema)
    header = header_column("key")
    missing = None if not schema.pks else f"Kafka key missing: table {table} has a primary key"
    reason = F.when(F.col("key").isNull(), F.lit(missing).cast("string"))
    for ref, key in keys:
        reason = reason.when(
            header == F.lit(bytes(ref.header)), _agreement(value, schema, ref, key)
        )
    reason = reason.when(
        header.isNull(),
        F.lit(
            f"Kafka key of table {table} has neither a Confluent (0x00 + id) nor a "
            "single-object (0xC3 0x01 + fingerprint) header"
        ),
    ).otherwise(
        F.concat(
            F.lit(f"Kafka key of table {table} has an unknown writer schema (header 0x"),
            F.lower(F.hex(header)),
            F.lit(")"),
        )
    )
    if not located:
        return F.when(_decoded(value), reason)
    where = F.concat(
        F.lit(" (topic "),
        F.col("topic"),
        F.lit(", partition "),
        F.col("partition").cast("string"),
        F.lit(", offset "),
        F.col("offset").cast("string"),
        F.lit(")"),
    )
    return F.when(_decoded(value), F.concat(reason, where))


def decoded_key(ref: KeySchemaRef) -> Column:
    """The row's key decoded with ``ref`` (``from_avro``, PERMISSIVE) where framed with it."""
    from pyspark.sql import functions as F

    body = body_column(header_length(ref.header), "key")
    framed = header_column("key") == F.lit(bytes(ref.header))
    return F.when(framed, avro_struct(body, ref.schema_json))


def with_key_check(
    frame: DataFrame,
    struct: str,
    schema: ValueSchema,
    keys: Sequence[KeySchemaRef],
    problem: str | None = None,
) -> DataFrame:
    """``frame`` with ``struct`` (a decoded value column) null where its key disagrees.

    The keys are decoded in one projection (beside ``struct``'s decode) and compared in the
    next: Spark does not merge a projection into the next where an expensive expression
    (``from_avro``) would be computed twice, so each is decoded once. ``problem``: also keep
    the reason in this column. ``frame`` needs ``key``, ``topic``, ``partition``, ``offset``.
    """
    from pyspark.sql import functions as F

    value = F.col(struct)
    names = [f"{struct}__key{j}" for j in range(len(keys))]
    frame = frame.withColumns(
        {n: F.when(_decoded(value), decoded_key(ref)) for n, ref in zip(names, keys, strict=True)}
    )
    decoded = [(ref, F.col(n)) for ref, n in zip(keys, names, strict=True)]
    reason = key_problem(value, schema, decoded, located=problem is not None)
    if problem is not None:
        frame = frame.withColumn(problem, reason)
        reason = F.col(problem)
    return frame.withColumn(struct, F.when(reason.isNull(), value)).drop(*names)


def _decoded(value: Column) -> Column:
    """Whether the value decoded (a body that does not is reported as such, not its key)."""
    return value.isNotNull() & value.getField("__change_type").isNotNull()


def _agreement(value: Column, schema: ValueSchema, ref: KeySchemaRef, key: Column) -> Column:
    """The problem of a key framed with ``ref`` (null: it agrees), for a non-null ``value``."""
    from pyspark.sql import functions as F

    table, tag = _table(schema), _tag(ref.header)
    pairs = key_pairs(schema, ref)
    if isinstance(pairs, str):
        return F.lit(pairs)
    broken = key.isNull()
    for key_field, _ in pairs:
        broken = broken | key.getField(key_field.avro_name).isNull()  # key fields are not null
    differences = [
        F.when(
            ~key.getField(k.avro_name).eqNullSafe(value.getField(v.avro_name)),
            F.concat(
                F.lit(f"key field {k.name}: key "),
                _shown(key.getField(k.avro_name), k),
                F.lit(", value "),
                _shown(value.getField(v.avro_name), v),
            ),
        )
        for k, v in pairs
    ]
    disagree = F.concat(
        F.lit(f"Kafka key disagrees with the value: table {table}, "),
        F.concat_ws("; ", *differences),
    )
    return F.when(
        broken, F.lit(f"Kafka key of table {table} does not decode with its writer schema ({tag})")
    ).when(F.coalesce(*differences).isNotNull(), disagree)


def key_pairs(schema: ValueSchema, ref: KeySchemaRef) -> list[tuple[AvroField, AvroField]] | str:
    """(key field, value field) of each field of the key schema ``ref``, in key order.

    Or why no key framed with ``ref`` can agree with a value of ``schema``: it is not a key
    record, holds other fields than the value's key fields, or another type for one.
    """
    table, tag = _table(schema), _tag(ref.header)
    fields = _key_fields(ref)
    if isinstance(fields, str):
        return f"Kafka key of table {table} does not fit its writer schema ({tag}): {fields}"
    wanted = list(schema.pks) or [CHANGE_TIME]
    names = [f.name for f in fields]
    if names != wanted:
        return (
            f"Kafka key of table {table} holds the fields {names} ({tag}); the "
            f"value's key fields are {wanted}"
        )
    pairs = []
    for key_field in fields:
        value_field = schema.fields.get(key_field.name) or _TECHNICAL[key_field.name]
        if key_field.type.to_avro() != value_field.type.to_avro():
            return (
                f"Kafka key of table {table}: key field {key_field.name} is "
                f"{json.dumps(key_field.type.to_avro())} in the key ({tag}) but "
                f"{json.dumps(value_field.type.to_avro())} in the value"
            )
        pairs.append((key_field, value_field))
    return pairs


def _key_fields(ref: KeySchemaRef) -> list[AvroField] | str:
    """The key schema's fields, or why it is not a key record."""
    try:
        record: Any = json.loads(ref.schema_json)
        if not isinstance(record, dict) or record.get("type") != "record":
            return "not an Avro record"
        return [AvroField.from_avro(f) for f in record["fields"]]
    except (ValueError, KeyError, TypeError, SchemaError) as exc:
        return f"not a key record ({exc})"


def _shown(column: Column, field: AvroField) -> Column:
    """A value for a reason: text (hex for bytes), cut to :data:`_SHOWN` characters, or null."""
    from pyspark.sql import functions as F

    base = field.type.to_avro()
    text = F.hex(column) if base == "bytes" else column.cast("string")
    return F.coalesce(F.substring(text, 1, _SHOWN), F.lit("null"))


def _table(schema: ValueSchema) -> str:
    return f"{schema.namespace}.{schema.name}"


def _tag(header: bytes) -> str:
    header = bytes(header)
    if header[:1] == b"\x00":
        return f"c:{int.from_bytes(header[1:5], 'big')}"
    return f"f:{header[2:10].hex()}"
