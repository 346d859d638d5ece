"""Spark's from_avro reads every schema ValueSchema/KeySchema write, with the values intact."""

import io
from datetime import date
from decimal import Decimal

import fastavro
import pytest

from producer_lib.schema.types import (
    AvroArray,
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroCLOB,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroField,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroNCLOB,
    AvroNVarchar,
    AvroRecord,
    AvroShort,
    AvroSTGeometry,
    AvroSTPoint,
    AvroString,
    AvroTimeMicros,
    AvroTimeMillis,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroURI,
    AvroUUID,
    AvroVarchar,
)
from producer_lib.schema.value_schema import KeySchema, ValueSchema

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TS_MICROS = 1_700_000_000_123_456
# original column name, type, value given to fastavro, value Spark returns
COLUMNS = [
    ("/BIC/FLAG", AvroBoolean(), True, True),
    ("BYTE", AvroByte(), -7, -7),
    ("SHORT", AvroShort(), 300, 300),
    ("INT", AvroInt(), -(2**31), -(2**31)),
    ("LONG", AvroLong(), 2**62, 2**62),
    ("FLOAT", AvroFloat(), 1.5, 1.5),
    ("DOUBLE", AvroDouble(), 2.25, 2.25),
    ("REVENUE$", AvroDecimal(12, 2), Decimal("-1234567890.12"), Decimal("-1234567890.12")),
    ("VARCHAR", AvroVarchar(5), "abc", "abc"),
    ("Größe", AvroNVarchar(10), "Größe", "Größe"),
    ("CUT", AvroNVarchar(3, truncate=True), "abc", "abc"),  # "truncate": true in the type
    ("CLOB", AvroCLOB(), "long text", "long text"),
    ("NCLOB", AvroNCLOB(), "long ü", "long ü"),
    ("A complicated $ name", AvroString(), "x", "x"),
    (
        "UUID",
        AvroUUID(),
        "0b6f3e0c-7a5b-4c43-9a3c-0d4f3b2a1c9e",
        "0b6f3e0c-7a5b-4c43-9a3c-0d4f3b2a1c9e",
    ),
    ("URI", AvroURI(), "https://example.com", "https://example.com"),
    ("BYTES", AvroBytes(), b"\x00\xff", bytearray(b"\x00\xff")),
    ("DATE", AvroDate(), date(2024, 2, 29), date(2024, 2, 29)),
    ("TIME_MS", AvroTimeMillis(), 45_296_789, 45_296_789),
    ("TIME_US", AvroTimeMicros(), 45_296_789_012, 45_296_789_012),
    ("TS_MS", AvroTimestamp(), TS_MICROS // 1000, TS_MICROS // 1000 * 1000),
    ("TS_US", AvroTimestampMicros(), TS_MICROS, TS_MICROS),
    ("GEOM", AvroSTGeometry(), "LINESTRING (0 0, 1 1)", "LINESTRING (0 0, 1 1)"),
    ("POINT", AvroSTPoint(), "POINT (1 2)", "POINT (1 2)"),
    ("TAGS", AvroArray(AvroString(), items_nullable=True), ["a", None], ["a", None]),
    ("ATTRS", AvroMap(AvroLong()), {"k": 1}, {"k": 1}),
    (
        "ADDR",
        AvroRecord("ADDR", [AvroField("zip code", AvroInt())]),
        {"_x_zip_20_code": 7},
        {"_x_zip_20_code": 7},
    ),
    ("EMPTY", AvroString(), None, None),
]
TIMESTAMPS = {"TS_MS", "TS_US"}


def _schema() -> ValueSchema:
    schema = ValueSchema("/BIC/AZSALES", "SAP BW", truncate_text=True)  # "truncateText": true
    for name, avro_type, _, _ in COLUMNS:
        schema.add_field(name, avro_type, doc=f"comment of {name}")
    schema.add_primary_key("INT", "REVENUE$")
    schema.set_data_product_owner_email("owner@example.com")
    return schema


def _encode(schema_json: dict, row: dict) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema_json), row)
    return buffer.getvalue()


def _decode(spark, schema_json: str, payload: bytes) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    decoded = spark.createDataFrame([(payload,)], "value binary").select(
        from_avro("value", schema_json).alias("r")
    )
    fields = decoded.schema["r"].dataType.fieldNames()
    columns = [
        F.unix_micros(f"r.{name}").alias(name)
        if name in {"TS_MS", "TS_US", "__change_time"}
        else F.col(f"r.`{name}`")
        for name in fields
    ]
    return decoded.select(*columns).collect()[0].asDict(recursive=True)


def test_value_schema_decodes_in_spark_with_the_values_written(spark):
    schema = _schema()
    fields = schema.fields
    row = {fields[name].avro_name: value for name, _, value, _ in COLUMNS}
    row.update(
        {
            "__change_type": "R",
            "__change_time": TS_MICROS,
            "__source_system": "BW",
            "__truncate": {"REGION": None, "YEAR": "2024"},
        }
    )
    decoded = _decode(spark, schema.to_json(), _encode(schema.to_avro_json(), row))
    for name, _, _, expected in COLUMNS:
        assert decoded[fields[name].avro_name] == expected, name
    assert decoded["__change_type"] == "R"
    assert decoded["__change_time"] == TS_MICROS
    assert decoded["__truncate"] == {"REGION": None, "YEAR": "2024"}
    assert decoded["__audit"] is None


def test_key_schemas_decode_in_spark(spark):
    key = KeySchema(_schema())
    payload = _encode(key.to_avro_json(), {"INT": 5, "_x_REVENUE_24_": Decimal("1.50")})
    assert _decode(spark, key.to_json(), payload) == {"INT": 5, "_x_REVENUE_24_": Decimal("1.50")}

    append_only = KeySchema(ValueSchema("LOG", "N"))
    payload = _encode(append_only.to_avro_json(), {"__change_time": TS_MICROS})
    assert _decode(spark, append_only.to_json(), payload) == {"__change_time": TS_MICROS}
