"""A value schema asks for a history table (SCD type 2): kept in its JSON, checked early."""

from __future__ import annotations

import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema


def _schema(keyed: bool = True) -> ValueSchema:
    schema = ValueSchema("CUSTOMER", "CRM")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(40))
    if keyed:
        schema.add_primary_key("ID")
    return schema


def test_history_travels_in_the_schema_json_and_comes_back():
    schema = _schema()
    schema.set_history("scd2")
    raw = schema.to_avro_json()
    assert raw["history"] == "scd2"
    assert ValueSchema.from_avro_json(raw).history == "scd2"
    assert "history" not in _schema().to_avro_json()  # only when asked for


def test_an_unknown_history_is_refused_naming_the_table():
    with pytest.raises(SchemaError, match="Unknown history 'scd3'.*CUSTOMER"):
        _schema().set_history("scd3")


def test_a_history_without_a_primary_key_is_refused_when_written_out():
    schema = _schema(keyed=False)
    schema.set_history("scd2")
    with pytest.raises(SchemaError, match="needs a primary key"):
        schema.to_json()
    schema.set_history(None)
    assert "history" not in schema.to_avro_json()
