"""Framing: Confluent and single-object headers, fingerprints, header parsing."""

from __future__ import annotations

import json

import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema.framing import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    Header,
    confluent_header,
    parse_header,
    schema_fingerprint,
    single_object_header,
)

RECORD = {
    "type": "record",
    "name": "Row",
    "namespace": "ns",
    "doc": "a table comment",
    "owner": "someone@example.com",
    "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": ["null", "string"]}],
}


def test_confluent_header_is_magic_and_big_endian_id() -> None:
    assert CONFLUENT_MAGIC == b"\x00"
    assert confluent_header(1) == b"\x00\x00\x00\x00\x01"
    assert confluent_header(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert confluent_header(2**31 - 1) == b"\x00\x7f\xff\xff\xff"


@pytest.mark.parametrize("bad_id", [-1, 2**31], ids=["negative", "too-big"])
def test_confluent_header_rejects_ids_outside_int32(bad_id: int) -> None:
    with pytest.raises(SchemaError):
        confluent_header(bad_id)


@pytest.mark.parametrize(
    ("schema", "java_fingerprint"),
    [("null", 7195948357588979594), ('"int"', 8247732601305521295)],
    ids=["null", "int"],
)
def test_fingerprint_matches_the_avro_reference_values(schema: str, java_fingerprint: int) -> None:
    # Values of Java's SchemaNormalization.parsingFingerprint64, sent little-endian.
    text = schema if schema.startswith('"') else json.dumps(schema)
    fingerprint = schema_fingerprint(text)
    assert len(fingerprint) == 8
    assert int.from_bytes(fingerprint, "little", signed=True) == java_fingerprint


def test_fingerprint_ignores_key_order_and_formatting() -> None:
    reordered = dict(reversed(list(RECORD.items())))
    assert schema_fingerprint(RECORD) == schema_fingerprint(json.dumps(reordered, indent=4))
    changed = {**RECORD, "fields": RECORD["fields"][:1]}
    assert schema_fingerprint(changed) != schema_fingerprint(RECORD)


def _amount(**amount_type: object) -> dict:
    """A record whose field ``amount`` has the given type attributes."""
    return {**RECORD, "fields": [{"name": "amount", "type": amount_type}]}


DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(_amount(**{**DECIMAL, "scale": 4}), id="decimal-scale"),
        pytest.param(_amount(**{**DECIMAL, "precision": 6}), id="decimal-precision"),
        pytest.param(_amount(type="bytes"), id="decimal-to-bytes"),
        pytest.param({**_amount(**DECIMAL), "primaryKeys": ["amount"]}, id="primary-key"),
        pytest.param({**_amount(**DECIMAL), "doc": "another comment"}, id="table-comment"),
        pytest.param({**_amount(**DECIMAL), "owner": "other@example.com"}, id="custom-property"),
    ],
)
def test_fingerprint_tells_apart_schemas_that_decode_or_key_differently(other: dict) -> None:
    # Avro's Parsing Canonical Form drops all of these: one fingerprint would name both
    # schemas, and a reader would decode 1.2345 (scale 4) as 123.45 (scale 2).
    assert schema_fingerprint(other) != schema_fingerprint(_amount(**DECIMAL))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            {"type": "long", "logicalType": "timestamp-millis"},
            {"type": "long", "logicalType": "timestamp-micros"},
        ),
        ({"type": "int"}, {"type": "int", "logicalType": "date"}),
    ],
    ids=["timestamp-millis-to-micros", "int-to-date"],
)
def test_fingerprint_tells_apart_logical_types(old: dict, new: dict) -> None:
    assert schema_fingerprint(_amount(**old)) != schema_fingerprint(_amount(**new))


def test_fingerprint_of_an_invalid_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        schema_fingerprint({"type": "record", "name": "x", "fields": [{"name": "a"}]})


def test_single_object_header_round_trips() -> None:
    fingerprint = schema_fingerprint(RECORD)
    header = single_object_header(fingerprint)
    assert header == SINGLE_OBJECT_MAGIC + fingerprint and len(header) == 10
    assert parse_header(header + b"\x02payload") == Header("single_object", None, fingerprint, 10)


def test_single_object_header_needs_eight_bytes() -> None:
    with pytest.raises(SchemaError):
        single_object_header(b"\x01\x02")


def test_confluent_header_round_trips() -> None:
    assert parse_header(confluent_header(42) + b"\x02") == Header("confluent", 42, None, 5)
    assert parse_header(memoryview(confluent_header(7))).schema_id == 7


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00\x01", b"\xc3\x01\x00", b"\xc3\x02" + bytes(8), b"Obj\x01", b"{json}"],
    ids=["empty", "short-confluent", "short-single-object", "bad-magic", "container", "json"],
)
def test_unknown_headers_are_rejected_showing_the_first_bytes(data: bytes) -> None:
    with pytest.raises(SchemaError) as info:
        parse_header(data)
    assert info.value.context["first_bytes"] == data[:12].hex(" ")
