import fastavro
import pyarrow as pa
import pytest

from producer_lib.errors import SchemaError
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
    avro_type_from_json,
)

UTC_MS, UTC_US = pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")
TSTZ = "TIMESTAMP WITH TIME ZONE"


def _logical(base, name, **props):
    return {"type": base, "logicalType": name, **props}


# type, Avro JSON (the encoder's contract), Arrow, DuckDB, Spark
MAPPINGS = [
    (AvroBoolean(), "boolean", pa.bool_(), "BOOLEAN", "BOOLEAN"),
    (AvroByte(), _logical("int", "BYTE"), pa.int8(), "TINYINT", "TINYINT"),
    (AvroShort(), _logical("int", "SHORT"), pa.int16(), "SMALLINT", "SMALLINT"),
    (AvroInt(), "int", pa.int32(), "INTEGER", "INT"),
    (AvroLong(), "long", pa.int64(), "BIGINT", "BIGINT"),
    (AvroFloat(), "float", pa.float32(), "FLOAT", "FLOAT"),
    (AvroDouble(), "double", pa.float64(), "DOUBLE", "DOUBLE"),
    (
        AvroDecimal(10, 2),
        _logical("bytes", "decimal", precision=10, scale=2),
        pa.decimal128(10, 2),
        "DECIMAL(10,2)",
        "DECIMAL(10,2)",
    ),
    (AvroVarchar(12), _logical("string", "VARCHAR", length=12), pa.string(), "VARCHAR", "STRING"),
    (AvroNVarchar(40), _logical("string", "NVARCHAR", length=40), pa.string(), "VARCHAR", "STRING"),
    (AvroCLOB(), _logical("string", "CLOB"), pa.string(), "VARCHAR", "STRING"),
    (AvroNCLOB(), _logical("string", "NCLOB"), pa.string(), "VARCHAR", "STRING"),
    (AvroString(), "string", pa.string(), "VARCHAR", "STRING"),
    (AvroUUID(), _logical("string", "uuid"), pa.string(), "UUID", "STRING"),
    (AvroURI(), _logical("string", "URI"), pa.string(), "VARCHAR", "STRING"),
    (AvroBytes(), "bytes", pa.binary(), "BLOB", "BINARY"),
    (AvroDate(), _logical("int", "date"), pa.date32(), "DATE", "DATE"),
    (AvroTimeMillis(), _logical("int", "time-millis"), pa.time32("ms"), "TIME", "INT"),
    (AvroTimeMicros(), _logical("long", "time-micros"), pa.time64("us"), "TIME", "BIGINT"),
    (AvroTimestamp(), _logical("long", "timestamp-millis"), UTC_MS, TSTZ, "TIMESTAMP"),
    (AvroTimestampMicros(), _logical("long", "timestamp-micros"), UTC_US, TSTZ, "TIMESTAMP"),
    (AvroSTGeometry(), _logical("string", "ST_GEOMETRY"), pa.string(), "VARCHAR", "STRING"),
    (AvroSTPoint(), _logical("string", "ST_POINT"), pa.string(), "VARCHAR", "STRING"),
    (
        AvroArray(AvroInt()),
        {"type": "array", "items": "int"},
        pa.list_(pa.field("item", pa.int32(), False)),
        "INTEGER[]",
        "ARRAY<INT>",
    ),
    (
        AvroArray(AvroDecimal(5, 1), items_nullable=True),
        {"type": "array", "items": ["null", _logical("bytes", "decimal", precision=5, scale=1)]},
        pa.list_(pa.decimal128(5, 1)),
        "DECIMAL(5,1)[]",
        "ARRAY<DECIMAL(5,1)>",
    ),
    (
        AvroMap(AvroString()),
        {"type": "map", "values": "string"},
        pa.map_(pa.string(), pa.field("value", pa.string(), False)),
        "MAP(VARCHAR, VARCHAR)",
        "MAP<STRING, STRING>",
    ),
    (
        AvroMap(AvroLong(), values_nullable=True),
        {"type": "map", "values": ["null", "long"]},
        pa.map_(pa.string(), pa.int64()),
        "MAP(VARCHAR, BIGINT)",
        "MAP<STRING, BIGINT>",
    ),
    (
        AvroRecord(
            "addr",
            [
                AvroField("street no", AvroInt(), nullable=False),
                AvroField("city", AvroString(), doc="town"),
            ],
        ),
        {
            "type": "record",
            "name": "addr",
            "fields": [
                {"name": "_x_street_20_no", "type": "int", "sourceName": "street no"},
                {"name": "city", "type": ["null", "string"], "default": None, "doc": "town"},
            ],
        },
        pa.struct([pa.field("street no", pa.int32(), False), pa.field("city", pa.string())]),
        'STRUCT("street no" INTEGER, "city" VARCHAR)',
        "STRUCT<`street no`: INT, `city`: STRING>",
    ),
]
IDS = [type(row[0]).__name__ + ("_nullable" if "null" in str(row[1]) else "") for row in MAPPINGS]


@pytest.mark.parametrize(("avro_type", "avro", "arrow", "duckdb", "spark"), MAPPINGS, ids=IDS)
def test_each_type_maps_to_avro_arrow_duckdb_and_spark(avro_type, avro, arrow, duckdb, spark):
    assert avro_type.to_avro() == avro
    assert avro_type.to_pyarrow() == arrow
    assert avro_type.to_duckdb() == duckdb
    assert avro_type.to_spark() == spark


@pytest.mark.parametrize("avro_type", [row[0] for row in MAPPINGS], ids=IDS)
def test_avro_json_parses_back_to_the_same_type(avro_type):
    assert avro_type_from_json(avro_type.to_avro()) == avro_type


@pytest.mark.parametrize("avro_type", [row[0] for row in MAPPINGS], ids=IDS)
def test_fastavro_accepts_each_type(avro_type):
    record = AvroRecord("r", [AvroField("f", avro_type)])
    fastavro.parse_schema(record.to_avro())


def test_types_are_frozen_values():
    assert AvroDecimal(10, 2) == AvroDecimal(10, 2)
    assert AvroInt() != AvroLong()
    with pytest.raises(AttributeError):
        AvroDecimal(10, 2).precision = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "make",
    [
        lambda: AvroDecimal(0, 0),
        lambda: AvroDecimal(39, 0),
        lambda: AvroDecimal(5, 6),
        lambda: AvroVarchar(0),
        lambda: AvroNVarchar(-1),
        lambda: AvroRecord("bad name", []),
        lambda: AvroRecord("r", [AvroField("a", AvroInt()), AvroField("a", AvroLong())]),
    ],
    ids=[
        "precision-0",
        "precision-39",
        "scale>precision",
        "varchar-0",
        "nvarchar-negative",
        "record-name",
        "duplicate-field",
    ],
)
def test_invalid_parameters_are_rejected(make):
    with pytest.raises(SchemaError):
        make()


def test_unknown_logical_type_falls_back_to_its_base_type():
    assert avro_type_from_json(_logical("long", "local-timestamp-micros")) == AvroLong()


@pytest.mark.parametrize(
    "json",
    [
        {"type": "fixed", "size": 4, "name": "f"},
        ["null", "int", "string"],
        "com.example.Named",
        _logical("bytes", "decimal"),
        _logical("string", "VARCHAR"),
    ],
    ids=["fixed", "union", "named-reference", "decimal-without-precision", "varchar-no-length"],
)
def test_unsupported_avro_json_is_a_schema_error(json):
    with pytest.raises(SchemaError):
        avro_type_from_json(json)
