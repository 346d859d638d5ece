"""DuckDB's Avro decode into columns gives what fastavro gives, or refuses the lot."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from lakehouse_writer.read.avro_arrow import ArrowDecoder, DecodeError, _long, _varints
from producer_lib.schema import (
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    AvroShort,
    AvroTimeMicros,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroUUID,
    AvroVarchar,
    ValueSchema,
)

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
AMOUNTS = [
    Decimal("0.00"),
    Decimal("-0.01"),
    Decimal("1.28"),
    Decimal("-1.28"),
    Decimal("-1.29"),
    Decimal("9999999999999.99"),
    Decimal("-9999999999999.99"),
    None,
]
WIDE = [
    Decimal("123456789012345678901234567890.12345678"),
    Decimal("-123456789012345678901234567890.12345678"),
    Decimal("0.00000001"),
    None,
]


def _schema() -> ValueSchema:
    schema = ValueSchema("ALL_TYPES", "ERP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("AMOUNT", AvroDecimal(15, 2))
    schema.add_field("WIDE", AvroDecimal(38, 8))
    schema.add_field("TINY", AvroByte())
    schema.add_field("SMALL", AvroShort())
    schema.add_field("QTY", AvroInt())
    schema.add_field("AT", AvroTimestampMicros())
    schema.add_field("AT MS", AvroTimestamp())  # a name Avro encodes
    schema.add_field("DAY", AvroDate())
    schema.add_field("CODE", AvroVarchar(4))
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_field("RATIO", AvroDouble())
    schema.add_field("OK", AvroBoolean())
    schema.add_field("BLOB", AvroBytes())
    schema.add_primary_key("ID")
    return schema


def _rows(schema: ValueSchema, n: int) -> list[dict[str, Any]]:
    avro = {f.name: f.avro_name for f in schema.fields.values()}
    rows = []
    for i in range(n):
        row = {
            "ID": i,
            "AMOUNT": AMOUNTS[i % len(AMOUNTS)],
            "WIDE": WIDE[i % len(WIDE)],
            "TINY": (i % 256) - 128 if i % 4 else None,
            "SMALL": -i,
            "QTY": i * 1000,
            "AT": T0 + dt.timedelta(microseconds=i * 1_234_567),
            "AT MS": T0.replace(microsecond=123000) if i % 2 else None,
            "DAY": dt.date(1970, 1, 1) + dt.timedelta(days=i - 10),
            "CODE": "AIR" if i % 3 else None,
            "NAME": f"Zürich {i}",
            "RATIO": i / 3,
            "OK": i % 2 == 0,
            "BLOB": bytes([i % 256, 0]),
        }
        technical = {
            "__change_type": "U",
            "__change_time": T0,
            "__source_system": "erp",
            "__truncate": {"REGION": None, "YEAR": str(i)} if i % 5 == 0 else None,
            "__audit": {"user": "me"},
        }
        rows.append({avro[k]: v for k, v in row.items()} | technical)
    return rows


def _bodies(schema_json: str, rows: list[dict[str, Any]]) -> list[bytes]:
    parsed = fastavro.parse_schema(json.loads(schema_json))
    out = []
    for row in rows:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, row)
        out.append(buffer.getvalue())
    return out


@pytest.fixture(scope="module")
def decoder() -> ArrowDecoder:
    found = ArrowDecoder()
    assert found.available, "duckdb-extension-avro is part of the writer's install"
    return found


def test_every_column_decodes_as_fastavro_decodes_it(decoder: ArrowDecoder) -> None:
    schema = _schema()
    schema_json = json.dumps(schema.to_avro_json())
    bodies = _bodies(schema_json, _rows(schema, 60))
    assert decoder.decodes(schema_json)

    table = decoder.decode(schema_json, bodies)

    parsed = fastavro.parse_schema(json.loads(schema_json))
    want = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies]
    got = table.to_pylist()
    for row in got:  # Arrow gives a map as (key, value) pairs
        for name in ("__truncate", "__audit", "__extension"):
            row[name] = dict(row[name]) if row[name] is not None else None
    assert got == want
    assert table.schema.field("AMOUNT").type == pa.decimal128(15, 2)
    assert table.schema.field("AT").type == pa.timestamp("us", "UTC")


def test_a_short_body_refuses_the_lot(decoder: ArrowDecoder) -> None:
    schema = _schema()
    schema_json = json.dumps(schema.to_avro_json())
    bodies = _bodies(schema_json, _rows(schema, 5))
    bodies[2] = bodies[2][:-3]
    with pytest.raises(DecodeError, match="do not decode"):
        decoder.decode(schema_json, bodies)


def test_a_decimal_with_more_digits_than_its_column_holds_is_refused(
    decoder: ArrowDecoder,
) -> None:
    def schema(precision: int) -> str:
        decimal = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 2}
        return json.dumps(
            {"type": "record", "name": "D", "fields": [{"name": "d", "type": decimal}]}
        )

    (body,) = _bodies(schema(10), [{"d": Decimal("12345.67")}])
    assert decoder.decode(schema(10), [body]).column("d").to_pylist() == [Decimal("12345.67")]
    with pytest.raises(DecodeError, match="does not fit"):
        decoder.decode(schema(3), [body])


def test_schemas_with_types_it_does_not_map_are_left_to_fastavro(decoder: ArrowDecoder) -> None:
    for avro_type in (AvroUUID(), AvroTimeMicros()):
        schema = ValueSchema("OTHER", "ERP")
        schema.add_field("ID", AvroLong(), nullable=False)
        schema.add_field("X", avro_type)
        assert not decoder.decodes(json.dumps(schema.to_avro_json()))
    with pytest.raises(ValueError, match="not decoded"):
        decoder.decode(json.dumps(schema.to_avro_json()), [b""])


def test_no_bodies_give_an_empty_table_of_the_final_types(decoder: ArrowDecoder) -> None:
    schema_json = json.dumps(_schema().to_avro_json())
    table = decoder.decode(schema_json, [])
    assert table.num_rows == 0
    assert table.schema.field("AMOUNT").type == pa.decimal128(15, 2)


def test_bodies_from_a_slice_of_an_arrow_column_decode_as_the_same_bytes_in_a_list(
    decoder: ArrowDecoder,
) -> None:
    schema = _schema()
    schema_json = json.dumps(schema.to_avro_json())
    bodies = _bodies(schema_json, _rows(schema, 8))
    column = pa.array([b"x", *bodies, b"y"], pa.binary()).slice(1, len(bodies))  # a table's rows
    assert decoder.decode(schema_json, column) == decoder.decode(schema_json, bodies)


def test_block_lengths_are_avros_zig_zag_varints() -> None:
    lengths = np.array([0, 1, 63, 64, 127, 128, 8191, 8192, 10**6, 2**31 - 1])
    assert _varints(lengths).to_pylist() == [_long(int(n)) for n in lengths]
    assert _long(64) == b"\x80\x01"  # zig-zag 128: two bytes
