"""Framing of Avro messages on the wire: Confluent and single-object headers.

Two standard forms tell a reader which writer schema encoded a message:

- Confluent wire format: ``0x00`` + the Schema Registry id as big-endian int32 (5 bytes),
  used when a Schema Registry is configured.
- Avro single-object encoding: ``0xC3 0x01`` + an 8-byte CRC-64-AVRO fingerprint,
  little-endian (10 bytes), with schemas kept in the ``_flow_schemas`` topic.

The fingerprint is taken over the whole schema (:func:`schema_fingerprint`), not only over
Avro's Parsing Canonical Form: that form drops logical types, precision, scale and every
custom property (``primaryKeys``, comments, governance metadata), so two schemas that decode
the same bytes into different values, or key rows differently, would share one fingerprint
and one catalog record. Headers written earlier under the canonical-form fingerprint keep
resolving to the record stored under it.

Quickstart::

    header = single_object_header(schema_fingerprint(schema))
    values = AvroEncoder(schema).encode(batch, header=header)
    parse_header(values[0])  # Header(kind="single_object", fingerprint=..., payload_offset=10)
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Literal

from fastavro.schema import fingerprint, parse_schema

from producer_lib.errors import SchemaError

__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "Header",
    "confluent_header",
    "identity_form",
    "parse_header",
    "schema_fingerprint",
    "single_object_header",
]

CONFLUENT_MAGIC = b"\x00"
SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_CONFLUENT_LEN = 5
_SINGLE_OBJECT_LEN = 10
_FINGERPRINT_LEN = 8
_SHOWN_BYTES = 12  # how many leading bytes an error message shows


@dataclass(frozen=True)
class Header:
    """A parsed message header.

    Attributes:
        kind: ``"confluent"`` or ``"single_object"``.
        schema_id: Schema Registry id (Confluent), else None.
        fingerprint: 8-byte CRC-64-AVRO fingerprint (single object), else None.
        payload_offset: Where the Avro payload starts (5 or 10).
    """

    kind: Literal["confluent", "single_object"]
    schema_id: int | None
    fingerprint: bytes | None
    payload_offset: int


def confluent_header(schema_id: int) -> bytes:
    """Build the 5-byte Confluent header.

    Args:
        schema_id: Schema Registry id, 0..2**31-1.

    Raises:
        SchemaError: The id does not fit a signed 32-bit integer or is negative.
    """
    if not 0 <= schema_id <= 2**31 - 1:
        raise SchemaError("a Confluent schema id is a non-negative int32", schema_id=schema_id)
    return CONFLUENT_MAGIC + struct.pack(">i", schema_id)


def schema_fingerprint(schema: dict[str, Any] | str) -> bytes:
    """CRC-64-AVRO fingerprint of the whole schema, little-endian: its identity on the wire.

    Taken over :func:`identity_form`: every name, type, logical type, precision, scale, doc
    and custom property counts, key order and formatting do not. Two schemas that decode or
    key rows differently never share a fingerprint (Avro's Parsing Canonical Form would).

    Args:
        schema: The schema as a JSON dict, or as JSON text.

    Returns:
        The 8 bytes single-object encoding puts after its magic.

    Raises:
        SchemaError: The schema is not valid Avro.
    """
    return bytes.fromhex(fingerprint(identity_form(schema), "CRC-64-AVRO"))


def identity_form(schema: dict[str, Any] | str) -> str:
    """The text a schema's fingerprint is taken over: its JSON, keys sorted, no whitespace.

    Raises:
        SchemaError: The schema is not valid Avro.
    """
    try:
        loaded = json.loads(schema) if isinstance(schema, str) else schema
        parse_schema(loaded)  # valid Avro, or no fingerprint
    except Exception as exc:
        raise SchemaError(f"cannot fingerprint schema: {exc}") from exc
    return json.dumps(loaded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def single_object_header(fingerprint: bytes) -> bytes:
    """Build the 10-byte single-object header from an 8-byte fingerprint.

    Raises:
        SchemaError: The fingerprint is not 8 bytes long.
    """
    if len(fingerprint) != _FINGERPRINT_LEN:
        raise SchemaError(
            "a single-object fingerprint is 8 bytes", fingerprint=bytes(fingerprint).hex()
        )
    return SINGLE_OBJECT_MAGIC + bytes(fingerprint)


def parse_header(data: bytes) -> Header:
    """Read the header of a framed Avro message.

    Args:
        data: The message bytes.

    Returns:
        The header, with the offset of the Avro payload.

    Raises:
        SchemaError: The message starts with neither header, or is too short.
    """
    data = bytes(data[:_SHOWN_BYTES])
    if data[:1] == CONFLUENT_MAGIC and len(data) >= _CONFLUENT_LEN:
        (schema_id,) = struct.unpack(">i", data[1:_CONFLUENT_LEN])
        return Header("confluent", schema_id, None, _CONFLUENT_LEN)
    if data[:2] == SINGLE_OBJECT_MAGIC and len(data) >= _SINGLE_OBJECT_LEN:
        return Header("single_object", None, data[2:_SINGLE_OBJECT_LEN], _SINGLE_OBJECT_LEN)
    raise SchemaError(
        "message has neither a Confluent (0x00 + 4-byte id) nor a single-object "
        "(0xC3 0x01 + 8-byte fingerprint) header; was it written by another producer?",
        first_bytes=data.hex(" "),
    )
