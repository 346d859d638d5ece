"""AvroEncoder: byte identity with fastavro.schemaless_writer, type by type, and its rules."""

from __future__ import annotations

import datetime as dt
import io
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from producer_lib.errors import EncodeError, SchemaError
from producer_lib.schema.encoder import AvroEncoder
from producer_lib.schema.framing import confluent_header

UTC = dt.UTC


@pytest.fixture(autouse=True)
def utc_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # fastavro converts naive datetimes with the local zone; the encoder takes them as UTC.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Row", "namespace": "test", "fields": list(fields)}


def fastavro_bytes(schema: dict[str, Any], rows: list[dict[str, Any]]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for row in rows:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        out.append(buf.getvalue())
    return out


def assert_identical(
    schema: dict[str, Any],
    batch: pa.RecordBatch | pa.Table,
    constants: dict[str, Any] | None = None,
    to_py: Callable[[Any], Any] | None = None,
) -> list[bytes]:
    rows = batch.to_pylist()
    if to_py is not None:
        rows = [r | {"v": None if r["v"] is None else to_py(r["v"])} for r in rows]
    rows = [{**r, **(constants or {})} for r in rows]
    got = AvroEncoder(schema).encode(batch, constants)
    assert got == fastavro_bytes(schema, rows)
    return got


def ts(values: list[int], unit: str, tz: str | None = None) -> pa.Array:
    return pa.array(values, pa.timestamp(unit, tz=tz))


VARINT_EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**20, -(2**20) - 1]
INT32_EDGES = [*VARINT_EDGES, 2**31 - 1, -(2**31)]
INT64_EDGES = [*INT32_EDGES, 2**31, -(2**31) - 1, 2**62, 2**63 - 1, -(2**63)]
FLOATS = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4e38]
DOUBLES = [0.0, -0.0, 1e-300, 5e-324, float("nan"), float("inf"), float("-inf"), 1.7e308]
TEXTS = ["", "a", "héllo", "日本語", "😀 emoji", "x" * 200, "\x00nul"]
DAYS = [0, 1, -1, -719162, 2932896, 18000, -25000]
TS_US = [0, 1, -1, -999, -1000, -1001, 1_700_000_000_123_456, -2_208_988_800_000_001]
UUIDS = [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.uuid5(uuid.NAMESPACE_DNS, "x")]


def dec_schema(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def dec_values(precision: int, scale: int) -> list[Decimal]:
    unscaled = [0, 1, -1, 127, -127, 128, -128, 129, -129, 255, -256, 32767, -32768, 32768]
    unscaled += [10**precision - 1, -(10**precision) + 1]
    return [Decimal(f"{u}E-{scale}") for u in unscaled if abs(u) < 10**precision]


def typed(avro_type: str, logical: str, **props: Any) -> dict[str, Any]:
    return {"type": avro_type, "logicalType": logical, **props}


# (id, avro type, arrow column, python value -> fastavro input or None)
CASES: list[tuple[str, Any, pa.Array, Callable[[Any], Any] | None]] = [
    ("boolean", "boolean", pa.array([True, False, True]), None),
    ("int32", "int", pa.array(INT32_EDGES, pa.int32()), None),
    ("int-from-int8", "int", pa.array([0, -128, 127], pa.int8()), None),
    ("int-from-uint16", "int", pa.array([0, 65535], pa.uint16()), None),
    ("long", "long", pa.array(INT64_EDGES, pa.int64()), None),
    ("long-from-uint64", "long", pa.array([0, 2**63 - 1], pa.uint64()), None),
    ("BYTE", typed("int", "BYTE"), pa.array([-128, 0, 127], pa.int8()), None),
    ("SHORT", typed("int", "SHORT"), pa.array([-32768, 32767], pa.int16()), None),
    ("float", "float", pa.array(FLOATS, pa.float32()), None),
    ("float-from-double", "float", pa.array([0.1, -0.0, float("nan"), 1e-50]), None),
    ("float-from-int", "float", pa.array([2**24 + 1, 2**53 + 1, -3]), None),
    ("double", "double", pa.array(DOUBLES), None),
    ("double-from-float", "double", pa.array(FLOATS, pa.float32()), None),
    ("double-from-int", "double", pa.array([2**53 + 1, -(2**63)]), None),
    ("string", "string", pa.array(TEXTS), None),
    ("large-string", "string", pa.array(TEXTS, pa.large_string()), None),
    ("string-view", "string", pa.array(TEXTS, pa.string_view()), None),
    ("dictionary", "string", pa.array(TEXTS).dictionary_encode(), None),
    ("bytes", "bytes", pa.array([b"", b"\x00\xff", b"x" * 130]), None),
    ("large-bytes", "bytes", pa.array([b"", b"ab"], pa.large_binary()), None),
    ("fixed-bytes", "bytes", pa.array([b"abc", b"\x00\x00\x00"], pa.binary(3)), None),
    ("decimal-5-2", dec_schema(5, 2), pa.array(dec_values(5, 2), pa.decimal128(5, 2)), None),
    (
        "decimal-38-10",
        dec_schema(38, 10),
        pa.array(dec_values(38, 10), pa.decimal128(38, 10)),
        None,
    ),
    ("decimal-18-0", dec_schema(18, 0), pa.array(dec_values(18, 0), pa.decimal128(18, 0)), None),
    ("decimal-rescaled", dec_schema(7, 3), pa.array(dec_values(4, 1), pa.decimal128(4, 1)), None),
    ("decimal-256", dec_schema(20, 2), pa.array(dec_values(20, 2), pa.decimal256(40, 2)), None),
    (
        "decimal-40-digits",
        dec_schema(40, 2),
        pa.array(dec_values(40, 2), pa.decimal256(40, 2)),
        None,
    ),
    ("decimal-from-int", dec_schema(10, 2), pa.array([0, 1, -1, 12345678]), Decimal),
    ("decimal-from-float", dec_schema(10, 2), pa.array([1.25, -3.5, 0.0]), lambda v: Decimal(v)),
    ("date", typed("int", "date"), pa.array(DAYS, pa.date32()), None),
    ("date64", typed("int", "date"), pa.array([d * 86_400_000 for d in DAYS], pa.date64()), None),
    ("time-millis-s", typed("int", "time-millis"), pa.array([0, 86399], pa.time32("s")), None),
    (
        "time-millis-ms",
        typed("int", "time-millis"),
        pa.array([0, 1, 86399999], pa.time32("ms")),
        None,
    ),
    (
        "time-millis-us",
        typed("int", "time-millis"),
        pa.array([0, 999, 1001, 86399999999], pa.time64("us")),
        None,
    ),
    (
        "time-millis-ns",
        typed("int", "time-millis"),
        pa.array([0, 1_999_000, 86399999999000], pa.time64("ns")),
        None,
    ),
    (
        "time-micros-us",
        typed("long", "time-micros"),
        pa.array([0, 1, 86399999999], pa.time64("us")),
        None,
    ),
    (
        "time-micros-ns",
        typed("long", "time-micros"),
        pa.array([0, 5000, 86399999999000], pa.time64("ns")),
        None,
    ),
    (
        "time-micros-ms",
        typed("long", "time-micros"),
        pa.array([0, 86399999], pa.time32("ms")),
        None,
    ),
    ("ts-millis-us", typed("long", "timestamp-millis"), ts(TS_US, "us", "UTC"), None),
    ("ts-millis-naive", typed("long", "timestamp-millis"), ts(TS_US, "us"), None),
    ("ts-millis-berlin", typed("long", "timestamp-millis"), ts(TS_US, "us", "Europe/Berlin"), None),
    (
        "ts-millis-s",
        typed("long", "timestamp-millis"),
        ts([0, -1, 1_700_000_000], "s", "+05:30"),
        None,
    ),
    ("ts-millis-ms", typed("long", "timestamp-millis"), ts([0, -1, -1001], "ms", "UTC"), None),
    (
        "ts-millis-ns",
        typed("long", "timestamp-millis"),
        ts([0, -1000, -1_001_000], "ns", "UTC"),
        None,
    ),
    ("ts-micros-us", typed("long", "timestamp-micros"), ts(TS_US, "us", "UTC"), None),
    ("ts-micros-naive", typed("long", "timestamp-micros"), ts(TS_US, "us"), None),
    ("ts-micros-s", typed("long", "timestamp-micros"), ts([0, -1, -(2**33)], "s"), None),
    (
        "ts-micros-ms",
        typed("long", "timestamp-micros"),
        ts([0, -1, 1], "ms", "America/New_York"),
        None,
    ),
    ("ts-micros-ns", typed("long", "timestamp-micros"), ts([0, -1000, 123456789000], "ns"), None),
    ("uuid-string", typed("string", "uuid"), pa.array([str(u) for u in UUIDS]), None),
    (
        "uuid-binary",
        typed("string", "uuid"),
        pa.array([u.bytes for u in UUIDS], pa.binary(16)),
        lambda b: str(uuid.UUID(bytes=b)),
    ),
    (
        "uuid-extension",
        typed("string", "uuid"),
        pa.array([u.bytes for u in UUIDS], pa.binary(16)).cast(pa.uuid()),
        None,
    ),
    ("VARCHAR", typed("string", "VARCHAR", length=10), pa.array(["", "abc", "0123456789"]), None),
    ("NVARCHAR", typed("string", "NVARCHAR", length=10), pa.array(["", "日本語", "😀" * 10]), None),
    ("CLOB", typed("string", "CLOB"), pa.array(TEXTS), None),
    ("NCLOB", typed("string", "NCLOB"), pa.array(TEXTS), None),
    ("URI", typed("string", "URI"), pa.array(["https://example.com/a?b=c"]), None),
    ("ST_GEOMETRY", typed("string", "ST_GEOMETRY"), pa.array(["POLYGON((0 0,1 0,1 1,0 0))"]), None),
    ("ST_POINT", typed("string", "ST_POINT"), pa.array(["POINT(1 2)"]), None),
    # per-row fallback types
    ("array", {"type": "array", "items": "int"}, pa.array([[], [1, -2], [2**31 - 1]]), None),
    (
        "record",
        record({"name": "x", "type": "int"}, {"name": "s", "type": ["null", "string"]})
        | {"name": "Inner"},
        pa.array([{"x": 1, "s": "a"}, {"x": -1, "s": None}]),
        None,
    ),
    (
        "enum",
        {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]},
        pa.array(["RED", "GREEN"]),
        None,
    ),
    (
        "fixed",
        {"type": "fixed", "name": "F4", "size": 4},
        pa.array([b"abcd", b"\x00" * 4], pa.binary(4)),
        None,
    ),
    ("local-ts", typed("long", "local-timestamp-micros"), ts([0, -1, 10**15], "us"), None),
]


def _nulls(arr: pa.Array) -> pa.Array:
    return pa.concat_arrays([pa.nulls(1, arr.type), arr, pa.nulls(1, arr.type)])


@pytest.mark.parametrize(
    ("avro_type", "arr", "to_py"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("shape", ["plain", "null-first", "null-last", "sliced"])
def test_type_is_byte_identical(avro_type: Any, arr: pa.Array, to_py: Any, shape: str) -> None:
    if shape == "plain":
        field_type, column = avro_type, arr
    elif shape == "sliced":
        field_type, column = avro_type, arr.slice(1)
    else:
        field_type = ["null", avro_type] if shape == "null-first" else [avro_type, "null"]
        column = _nulls(arr)
    schema = record({"name": "v", "type": field_type}, {"name": "after", "type": "int"})
    batch = pa.table({"v": column, "after": pa.array(range(len(column)), pa.int32())})
    assert_identical(schema, batch, to_py=to_py)


def test_many_columns_empty_and_single_row_batches() -> None:
    schema = record(
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", "string"]},
        {"name": "c", "type": dec_schema(9, 2)},
        {"name": "d", "type": {"type": "map", "values": "long"}},
    )
    table = pa.table(
        {
            "a": pa.array([1, 2], pa.int64()),
            "b": pa.array(["x", None]),
            "c": pa.array([Decimal("1.00"), Decimal("-0.01")], pa.decimal128(9, 2)),
        }
    )
    constants = {"d": {"k": 1}}
    assert assert_identical(schema, table.slice(0, 0), constants) == []
    assert len(assert_identical(schema, table.slice(1, 1), constants)) == 1
    assert_identical(schema, table, constants)


def test_record_batch_and_chunked_table_give_the_same_bytes() -> None:
    schema = record({"name": "s", "type": "string"}, {"name": "n", "type": ["null", "long"]})
    table = pa.table({"s": ["a", "bb", "ccc", "dddd"], "n": [1, None, 3, None]})
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 2), table.slice(3)])
    expected = assert_identical(schema, table)
    assert AvroEncoder(schema).encode(chunked) == expected
    assert AvroEncoder(schema).encode(table.to_batches()[0]) == expected


def test_source_name_constants_and_absent_nullable_fields() -> None:
    schema = record(
        {"name": "id", "type": "long", "sourceName": "ID col"},
        {"name": "__change_type", "type": "string"},
        {"name": "__truncate", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "note", "type": ["string", "null"]},
        {"name": "id_again", "type": "long", "sourceName": "ID col"},
    )
    batch = pa.table({"ID col": [5, -5]})
    got = AvroEncoder(schema).encode(batch, {"__change_type": "R", "__truncate": {"a": "b"}})
    rows = [
        {"id": v, "__change_type": "R", "__truncate": {"a": "b"}, "note": None, "id_again": v}
        for v in (5, -5)
    ]
    assert got == fastavro_bytes(schema, rows)


def test_constant_overrides_a_column() -> None:
    schema = record({"name": "a", "type": "long"})
    batch = pa.table({"a": [1, 2]})
    assert AvroEncoder(schema).encode(batch, {"a": 7}) == fastavro_bytes(schema, [{"a": 7}] * 2)


def test_named_types_defined_in_one_field_and_used_in_another() -> None:
    color = {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}
    schema = record(
        {"name": "a", "type": color}, {"name": "b", "type": ["null", "Color", "string"]}
    )
    batch = pa.table({"a": ["RED", "BLUE"], "b": ["BLUE", None]})
    assert_identical(schema, batch)


def test_header_is_prepended_and_buffer_matches_list() -> None:
    schema = record({"name": "a", "type": "long"}, {"name": "s", "type": "string"})
    batch = pa.table({"a": [1, 300, -7], "s": ["x", "", "ÿ"]})
    enc = AvroEncoder(schema)
    header = confluent_header(42)
    values = enc.encode(batch, header=header)
    plain = fastavro_bytes(schema, batch.to_pylist())
    assert values == [header + p for p in plain]
    buf, offsets = enc.encode_buffer(batch, header=header)
    assert offsets.dtype == np.int64 and len(offsets) == 4 and offsets[0] == 0
    assert [buf[offsets[i] : offsets[i + 1]].tobytes() for i in range(3)] == values


def test_nvarchar_truncates_by_characters_and_counts_when_opted_in() -> None:
    batch = pa.table({"t": ["abcd", "日本語です", "ok", None, "😀😀😀😀"]})
    nvarchar = typed("string", "NVARCHAR", length=3, truncate=True)
    schema_nullable = record({"name": "t", "type": ["null", nvarchar]})
    enc = AvroEncoder(schema_nullable)
    got = enc.encode(batch)
    expected = [{"t": v if v is None else v[:3]} for v in batch.column("t").to_pylist()]
    assert got == fastavro_bytes(schema_nullable, expected)
    assert enc.truncations == {"t": 3}
    enc.encode(batch.slice(0, 1))
    assert enc.truncations == {"t": 4}


def test_nvarchar_constant_is_truncated_too_when_opted_in() -> None:
    schema = record({"name": "t", "type": typed("string", "NVARCHAR", length=2, truncate=True)})
    enc = AvroEncoder(schema)
    got = enc.encode(pa.table({"x": [1, 2]}), {"t": "äöü"})
    assert got == fastavro_bytes(schema, [{"t": "äö"}] * 2)
    assert enc.truncations == {"t": 2}


def _error(schema: dict[str, Any], batch: pa.Table, constants: Any = None) -> EncodeError:
    with pytest.raises(EncodeError) as info:
        AvroEncoder(schema).encode(batch, constants)
    return info.value


ERROR_CASES = [
    ("null-in-required", "long", pa.array([1, None]), "row 1"),
    ("null-in-required-string", "string", pa.array(["a", "b", None]), "row 2"),
    ("null-in-required-array", {"type": "array", "items": "int"}, pa.array([[1], None]), "row 1"),
    ("int-overflow", "int", pa.array([0, 2**31]), "2147483648"),
    ("int-underflow", "int", pa.array([-(2**31) - 1]), "overflows Avro int"),
    ("uint64-overflow", "long", pa.array([2**64 - 1], pa.uint64()), "overflows Avro long"),
    ("float-overflow", "float", pa.array([1.0, 1e39]), "overflows Avro float"),
    ("varchar-ascii", typed("string", "VARCHAR", length=5), pa.array(["ok", "hé"]), "not ASCII"),
    (
        "varchar-length",
        typed("string", "VARCHAR", length=3),
        pa.array(["abc", "abcd"]),
        "VARCHAR(3)",
    ),
    (
        "decimal-precision",
        dec_schema(5, 2),
        pa.array([Decimal("1000.00")], pa.decimal128(6, 2)),
        "precision 5",
    ),
    (
        "decimal-negative-precision",
        dec_schema(3, 0),
        pa.array([Decimal("-1000")], pa.decimal128(4, 0)),
        "precision 3",
    ),
    ("decimal-scale", dec_schema(5, 1), pa.array([Decimal("1.25")], pa.decimal128(5, 2)), "scale"),
    (
        "fallback-bad-value",
        {"type": "enum", "name": "E", "symbols": ["A"]},
        pa.array(["A", "B"]),
        "row 1",
    ),
]


@pytest.mark.parametrize(
    ("avro_type", "arr", "detail"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_value_rules_name_the_column(avro_type: Any, arr: pa.Array, detail: str) -> None:
    schema = record({"name": "f", "type": avro_type, "sourceName": "SRC_COL"})
    err = _error(schema, pa.table({"SRC_COL": arr}))
    assert "SRC_COL" in str(err) and detail in str(err)
    assert err.context["column"] == "SRC_COL"


def test_nulls_are_ignored_by_value_rules() -> None:
    schema = record(
        {"name": "f", "type": ["null", "int"]}, {"name": "d", "type": ["null", dec_schema(2, 0)]}
    )
    batch = pa.table(
        {"f": pa.array([1, None]), "d": pa.array([Decimal(99), None], pa.decimal128(5, 0))}
    )
    assert_identical(schema, batch)
    # a null slot of a filtered array may hold any value: it must not trip the int rule
    masked = pa.array([1, 2**40], mask=np.array([False, True]))
    assert_identical(schema, pa.table({"f": masked, "d": pa.nulls(2, pa.decimal128(5, 0))}))


def test_missing_required_field_and_unknown_constant() -> None:
    schema = record({"name": "needed", "type": "string"})
    err = _error(schema, pa.table({"other": [1]}))
    assert "needed" in str(err)
    err = _error(schema, pa.table({"needed": ["x"]}), {"nope": 1})
    assert "nope" in str(err)


def test_varchar_constant_rule() -> None:
    schema = record({"name": "v", "type": typed("string", "VARCHAR", length=2)})
    assert "VARCHAR" in str(_error(schema, pa.table({"x": [1]}), {"v": "abc"}))


def test_invalid_schemas_are_schema_errors() -> None:
    with pytest.raises(SchemaError):
        AvroEncoder({"type": "string"})  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        AvroEncoder(record({"name": "a", "type": "no-such-type"}))
