import duckdb
import fastavro
import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema.duckdb_types import (
    avro_type_from_duckdb,
    parse_duckdb_type,
    value_schema_from_describe,
)
from producer_lib.schema.types import (
    AvroArray,
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroField,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroRecord,
    AvroShort,
    AvroSTGeometry,
    AvroString,
    AvroTimeMicros,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroUUID,
)
from producer_lib.schema.value_schema import ValueSchema


def _describe(sql_type: str) -> str:
    """The type string real DuckDB DESCRIBE prints for a column declared as ``sql_type``."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (c {sql_type})")
    return con.execute("DESCRIBE t").fetchall()[0][1]


def _rec(name, *fields, namespace=None):
    return AvroRecord(name, tuple(AvroField(n, t) for n, t in fields), namespace)


# declared type, expected Avro type (column "c")
CASES = [
    ("BOOLEAN", AvroBoolean()),
    ("TINYINT", AvroByte()),
    ("SMALLINT", AvroShort()),
    ("INTEGER", AvroInt()),
    ("BIGINT", AvroLong()),
    ("UTINYINT", AvroShort()),
    ("USMALLINT", AvroInt()),
    ("UINTEGER", AvroLong()),
    ("UBIGINT", AvroDecimal(20, 0)),
    ("HUGEINT", AvroDecimal(38, 0)),
    ("UHUGEINT", AvroDecimal(38, 0)),
    ("FLOAT", AvroFloat()),
    ("DOUBLE", AvroDouble()),
    ("DECIMAL(10,2)", AvroDecimal(10, 2)),
    ("NUMERIC", AvroDecimal(18, 3)),
    ("DECIMAL(38,10)", AvroDecimal(38, 10)),
    ("VARCHAR", AvroString()),
    ("VARCHAR(20)", AvroString()),
    ("ENUM('a', 'it''s')", AvroString()),
    ("JSON", AvroString()),
    ("BLOB", AvroBytes()),
    ("UUID", AvroUUID()),
    ("GEOMETRY", AvroSTGeometry()),
    ("DATE", AvroDate()),
    ("TIME", AvroTimeMicros()),
    ("TIMESTAMP", AvroTimestampMicros()),
    ("TIMESTAMPTZ", AvroTimestampMicros()),
    ("TIMESTAMP_NS", AvroTimestampMicros()),
    ("TIMESTAMP_MS", AvroTimestamp()),
    ("TIMESTAMP_S", AvroTimestamp()),
    ("INTEGER[]", AvroArray(AvroInt(), items_nullable=True)),
    ("INTEGER[3]", AvroArray(AvroInt(), items_nullable=True)),
    ("VARCHAR[][]", AvroArray(AvroArray(AvroString(), True), True)),
    ("MAP(VARCHAR, DOUBLE)", AvroMap(AvroDouble(), values_nullable=True)),
    (
        'STRUCT(a INTEGER, "b c" VARCHAR, "select" DATE[])',
        _rec("c", ("a", AvroInt()), ("b c", AvroString()), ("select", AvroArray(AvroDate(), True))),
    ),
    (
        'STRUCT("a""q" INTEGER, "it\'s" BIGINT, "Größe" DOUBLE)',
        _rec("c", ('a"q', AvroInt()), ("it's", AvroLong()), ("Größe", AvroDouble())),
    ),
    (
        'STRUCT("x y" MAP(VARCHAR, STRUCT(z TIMESTAMP WITH TIME ZONE)))[]',
        AvroArray(
            _rec(
                "c",
                (
                    "x y",
                    AvroMap(_rec("_x_x_20_y", ("z", AvroTimestampMicros()), namespace="c"), True),
                ),
            ),
            True,
        ),
    ),
]


@pytest.mark.parametrize(("declared", "expected"), CASES, ids=[c[0] for c in CASES])
def test_real_describe_output_maps_to_avro(declared, expected):
    assert avro_type_from_duckdb(_describe(declared), "c") == expected


@pytest.mark.parametrize(
    "declared",
    [
        "INTERVAL",
        "BIT",
        "UNION(n INTEGER, s VARCHAR)",
        "TIMETZ",
        "BIGNUM",
        "MAP(INTEGER, VARCHAR)",
        "STRUCT(a INTERVAL)",
    ],
    ids=["interval", "bit", "union", "timetz", "bignum", "map-int-key", "nested-interval"],
)
def test_unsupported_types_name_the_column_and_type(declared):
    described = _describe(declared)
    with pytest.raises(SchemaError) as info:
        avro_type_from_duckdb(described, "weird col")
    assert info.value.column == "weird col"
    assert info.value.duckdb_type == described


@pytest.mark.parametrize("text", ["", "DECIMAL(10", "STRUCT(a)", "INTEGER]", "MAP(VARCHAR)"])
def test_malformed_type_strings_are_schema_errors(text):
    with pytest.raises(SchemaError, match="parse"):
        parse_duckdb_type(text)


def test_value_schema_from_describe_of_a_real_table():
    con = duckdb.connect()
    con.execute("""CREATE TABLE orders (
        id BIGINT PRIMARY KEY, "Größe $" DECIMAL(9,3), tags VARCHAR[] NOT NULL,
        addr STRUCT(street VARCHAR, "zip code" INTEGER), created TIMESTAMPTZ)""")
    schema = value_schema_from_describe("ORDERS", "SHOP", con.execute("DESCRIBE orders").fetchall())
    assert list(schema.fields) == ["id", "Größe $", "tags", "addr", "created"]
    assert schema.pks == ("id",)
    assert schema.field("id").nullable is False and schema.field("tags").nullable is False
    assert schema.field("Größe $").type == AvroDecimal(9, 3)
    assert schema.field("addr").type.namespace == "ORDERS"
    parsed = fastavro.parse_schema(schema.to_avro_json())
    assert fastavro.validate(
        {
            "id": 1,
            "_x_Gr_f6__df_e_20__24_": None,
            "tags": ["a", None],
            "addr": {"street": "Main", "_x_zip_20_code": 1},
            "created": None,
            "__change_type": "I",
            "__change_time": 0,
            "__source_system": "S",
        },
        parsed,
    )
    assert ValueSchema.from_avro_json(schema.to_json()) == schema


def test_staging_types_are_accepted_by_duckdb_and_describe_back_to_the_same_avro():
    con = duckdb.connect()
    rows = [(f"col {i}", _describe(declared), True) for i, (declared, _) in enumerate(CASES)]
    schema = value_schema_from_describe("T", "N", rows)
    columns = ", ".join(f'"{f.name}" {f.type.to_duckdb()}' for f in schema.fields.values())
    con.execute(f"CREATE TABLE staging ({columns})")
    again = value_schema_from_describe("T", "N", con.execute("DESCRIBE staging").fetchall())
    for name, field in schema.fields.items():
        if field.type not in (AvroTimestamp(), AvroSTGeometry()):  # staged wider: TSTZ, VARCHAR
            assert again.field(name).type == field.type, name


def test_rows_with_bool_nullability_work_without_duckdb():
    schema = value_schema_from_describe("T", "N", [("a", "INTEGER", False), ("b", "UUID", True)])
    assert [(f.name, f.nullable) for f in schema.fields.values()] == [("a", False), ("b", True)]
