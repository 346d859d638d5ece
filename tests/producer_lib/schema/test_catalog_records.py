"""Records of the embedded catalog, and telling a Schema Registry's records from ours."""

from __future__ import annotations

import json

import pytest

from producer_lib.schema import AvroLong, ValueSchema, schema_fingerprint
from producer_lib.schema.catalog_records import (
    encode_record,
    is_registry_key,
    parse_record,
    table_of,
)


@pytest.mark.parametrize(
    ("key", "registry"),
    [
        pytest.param(
            b'{"keytype":"SCHEMA","subject":"o-value","version":1,"magic":1}',
            True,
            id="confluent-schema",
        ),
        pytest.param(b'{"keytype":"NOOP","magic":0}', True, id="confluent-noop"),
        pytest.param(b'{"keytype":"CONFIG","subject":null,"magic":0}', True, id="config"),
        pytest.param(b"0123456789abcdef", False, id="our-fingerprint"),
        pytest.param(b'{"subject":"x"}', False, id="json-without-keytype"),
        pytest.param(b"{not json", False, id="broken-json"),
        pytest.param(None, False, id="no-key"),
    ],
)
def test_is_registry_key(key, registry):
    assert is_registry_key(key) is registry


def _schema(name: str = "ORDERS", namespace: str = "SHOP") -> ValueSchema:
    schema = ValueSchema(name, namespace)
    schema.add_field("ID", AvroLong(), nullable=False)
    return schema


def test_encode_then_parse_round_trips():
    avro = _schema().to_avro_json()
    fp = schema_fingerprint(avro).hex()
    key, value = encode_record(fp, "orders", "value", avro)
    record = parse_record(value)
    assert key == fp.encode()
    assert (record.fingerprint, record.topic, record.kind, record.subject) == (
        fp,
        "orders",
        "value",
        "orders-value",
    )
    assert record.schema == avro


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(
            b'{"subject":"o-value","version":1,"id":1,"schema":"\\"string\\""}', id="registry-value"
        ),
        pytest.param(b"", id="empty"),
        pytest.param(None, id="null"),
        pytest.param(b"[1]", id="not-an-object"),
    ],
)
def test_parse_record_refuses_what_is_not_ours(value):
    with pytest.raises(ValueError, match="not a catalog record"):
        parse_record(value)


def test_table_of_uses_the_original_names():
    assert table_of(_schema().to_avro_json()) == "SHOP.ORDERS"
    assert table_of(_schema("/BIC/ORDERS", "SAP BW").to_avro_json()) == "SAP BW./BIC/ORDERS"
    assert table_of({"type": "string"}) is None
    assert table_of(json.loads('{"type": "record", "name": "1bad", "fields": []}')) is None
