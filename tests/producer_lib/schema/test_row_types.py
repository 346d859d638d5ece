import io
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema.row_types import RowType, create_key_row, create_truncate_row
from producer_lib.schema.types import (
    AvroArray,
    AvroBoolean,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroString,
    AvroTimeMicros,
    AvroTimeMillis,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroUUID,
    AvroVarchar,
)
from producer_lib.schema.value_schema import KeySchema, ValueSchema


def _schema(with_key: bool = True) -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("REGION", AvroString())
    schema.add_field("DAY", AvroDate())
    if with_key:
        schema.add_primary_key("ID")
    return schema


@pytest.mark.parametrize(
    ("member", "code"),
    [
        ("INSERT", "I"),
        ("UPDATE", "U"),
        ("UPSERT", "A"),
        ("REPLACE", "R"),
        ("BEFORE", "B"),
        ("DELETE", "D"),
        ("EXTERMINATE", "X"),
        ("GDPR", "G"),
        ("ARCHIVE", "P"),
        ("TRUNCATE", "T"),
    ],
)
def test_row_type_codes(member, code):
    assert RowType[member].value == code
    assert RowType(code) is RowType[member]
    assert RowType[member] == code  # a str: goes straight into __change_type


def test_whole_table_truncate_row_has_null_payload_and_no_scope():
    row = create_truncate_row(_schema(), None)
    # ID is not nullable: Avro has no null for it, so it carries a neutral 0
    assert row == {"ID": 0, "REGION": None, "DAY": None, "__change_type": "T", "__truncate": None}


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"REGION": "EU"}, {"REGION": "EU"}),
        ({"DAY": date(2024, 3, 1), "REGION": None}, {"DAY": "2024-03-01", "REGION": None}),
        ({"ID": Decimal("12")}, {"ID": "12"}),
        ({"REGION": True}, {"REGION": "true"}),
        ({"REGION": datetime(2024, 3, 1, 12, tzinfo=UTC)}, {"REGION": "2024-03-01T12:00:00+00:00"}),
        ({}, None),
    ],
    ids=["text", "date-and-null", "decimal", "bool", "datetime", "empty-is-whole-table"],
)
def test_scoped_truncate_row_sends_the_scope_as_text(scope, expected):
    assert create_truncate_row(_schema(), scope)["__truncate"] == expected


def test_truncate_scope_must_name_existing_columns():
    with pytest.raises(SchemaError, match="No such column") as info:
        create_truncate_row(_schema(), {"COUNTRY": "DE"})
    assert info.value.column == "COUNTRY"


def test_key_row_takes_primary_key_fields_in_key_order():
    schema = _schema(with_key=False)
    schema.add_primary_key("REGION", "ID")
    row = {"ID": 5, "REGION": "EU", "DAY": None, "__change_type": "I"}
    assert list(create_key_row(row, KeySchema(schema)).items()) == [("REGION", "EU"), ("ID", 5)]


def test_key_row_of_a_row_missing_key_columns_is_an_error():
    with pytest.raises(SchemaError, match="primary key"):
        create_key_row({"REGION": "EU"}, KeySchema(_schema()))


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"REGION": "EU"}, {"__change_time": None}),
        ({"REGION": "EU", "__change_time": 17}, {"__change_time": 17}),
    ],
    ids=["filled-by-producer", "taken-from-row"],
)
def test_append_only_key_row_holds_the_transaction_time(row, expected):
    assert create_key_row(row, KeySchema(_schema(with_key=False))) == expected


def test_truncate_of_a_keyed_table_encodes_for_every_non_nullable_type():
    """The DESIGN example: a TRUNCATE row and its key must be encodable, whatever the key."""
    schema = ValueSchema("EVERY", "TYPES")
    types = [
        AvroBoolean(),
        AvroInt(),
        AvroLong(),
        AvroFloat(),
        AvroDouble(),
        AvroString(),
        AvroBytes(),
        AvroDecimal(10, 2),
        AvroDate(),
        AvroTimeMillis(),
        AvroTimeMicros(),
        AvroTimestamp(),
        AvroTimestampMicros(),
        AvroUUID(),
        AvroVarchar(4),
        AvroArray(AvroInt()),
        AvroMap(AvroString()),
    ]
    for i, avro_type in enumerate(types):
        schema.add_field(f"C{i}", avro_type, nullable=False)
    schema.set_primary_keys("C1", "C7", "C8")
    key_schema = KeySchema(schema)

    row = create_truncate_row(schema, None)
    row.update({"__change_time": 0, "__source_system": "S"})
    key = create_key_row(row, key_schema)

    assert key == {"C1": 0, "C7": Decimal(0), "C8": date(1970, 1, 1)}
    for avro_schema, record in ((schema.to_avro_json(), row), (key_schema.to_avro_json(), key)):
        fastavro.schemaless_writer(io.BytesIO(), fastavro.parse_schema(avro_schema), record)


def test_a_scoped_truncate_row_encodes_as_fastavro_would():
    import io

    import fastavro
    import pyarrow as pa

    from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema, create_truncate_row
    from producer_lib.schema.encoder import AvroEncoder

    schema = ValueSchema("T", "NS")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("REGION", AvroNVarchar(5))
    schema.add_primary_key("ID")
    row = {
        **create_truncate_row(schema, {"REGION": "EU"}),
        "__change_time": 5,
        "__source_system": "TEST",
    }
    avro = schema.to_avro_json()
    table = pa.Table.from_pylist([row], schema=schema.get_pyarrow())  # __truncate: an Arrow map
    [encoded] = AvroEncoder(avro).encode(table)
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, fastavro.parse_schema(avro), row)
    assert encoded == expected.getvalue()
    decoded = fastavro.schemaless_reader(io.BytesIO(encoded), fastavro.parse_schema(avro), None)
    assert decoded["__truncate"] == {"REGION": "EU"} and decoded["__change_type"] == "T"
