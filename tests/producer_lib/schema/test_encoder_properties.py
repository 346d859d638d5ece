"""Property: for random schemas and rows, AvroEncoder's bytes equal fastavro's."""

from __future__ import annotations

import datetime as dt
import io
import os
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer_lib.schema.encoder import AvroEncoder


@pytest.fixture(autouse=True, scope="module")
def utc_local_time() -> Any:
    # fastavro converts naive datetimes with the local zone; the encoder takes them as UTC.
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    time.tzset()
    yield
    mp.undo()
    time.tzset()


@dataclass(frozen=True)
class Kind:
    avro: Any
    arrow: pa.DataType
    values: st.SearchStrategy[Any]
    nvarchar: int | None = None


def _ms(t: dt.time) -> dt.time:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


@st.composite
def decimal_kind(draw: st.DrawFn) -> Kind:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    bound = 10**precision - 1
    values = st.integers(-bound, bound).map(lambda u: Decimal(f"{u}E-{scale}"))
    avro = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return Kind(avro, pa.decimal128(precision, scale), values)


@st.composite
def nvarchar_kind(draw: st.DrawFn) -> Kind:
    length = draw(st.integers(1, 5))
    avro = {"type": "string", "logicalType": "NVARCHAR", "length": length}
    if draw(st.booleans()):  # opted in: longer text is cut to length
        avro["truncate"] = True
        return Kind(avro, pa.string(), st.text(max_size=8), nvarchar=length)
    return Kind(avro, pa.string(), st.text(max_size=length))  # longer text is refused


SIMPLE_KINDS = [
    Kind("boolean", pa.bool_(), st.booleans()),
    Kind("int", pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    Kind("long", pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    Kind("float", pa.float32(), st.floats(width=32)),
    Kind("double", pa.float64(), st.floats()),
    Kind("string", pa.string(), st.text(max_size=20)),
    Kind("bytes", pa.binary(), st.binary(max_size=20)),
    Kind({"type": "int", "logicalType": "date"}, pa.date32(), st.dates()),
    Kind({"type": "int", "logicalType": "time-millis"}, pa.time32("ms"), st.times().map(_ms)),
    Kind({"type": "long", "logicalType": "time-micros"}, pa.time64("us"), st.times()),
    Kind(
        {"type": "long", "logicalType": "timestamp-millis"},
        pa.timestamp("us", tz="UTC"),
        st.datetimes(timezones=st.just(dt.UTC)),
    ),
    Kind({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us"), st.datetimes()),
    Kind({"type": "string", "logicalType": "uuid"}, pa.string(), st.uuids().map(str)),
    Kind({"type": "array", "items": "long"}, pa.list_(pa.int64()), st.lists(st.integers(-5, 5))),
]

KINDS = st.one_of(st.sampled_from(SIMPLE_KINDS), decimal_kind(), nvarchar_kind())


@st.composite
def batches(draw: st.DrawFn) -> tuple[dict[str, Any], pa.Table, list[Kind]]:
    kinds = draw(st.lists(KINDS, min_size=1, max_size=6))
    rows = draw(st.integers(0, 8))
    fields, columns = [], {}
    for i, kind in enumerate(kinds):
        nullable = draw(st.booleans())
        avro = kind.avro
        if nullable:
            avro = ["null", avro] if draw(st.booleans()) else [avro, "null"]
        values = st.none() | kind.values if nullable else kind.values
        column = draw(st.lists(values, min_size=rows, max_size=rows))
        fields.append({"name": f"f{i}", "type": avro})
        columns[f"f{i}"] = pa.array(column, kind.arrow)
    schema = {"type": "record", "name": "R", "fields": fields}
    table = pa.table(columns) if columns else pa.table({})
    if draw(st.booleans()) and rows:
        table = table.slice(1)
    return schema, table, kinds


def expected(schema: dict[str, Any], table: pa.Table, kinds: list[Kind]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for row in table.to_pylist():
        for i, kind in enumerate(kinds):
            if kind.nvarchar is not None and row[f"f{i}"] is not None:
                row[f"f{i}"] = row[f"f{i}"][: kind.nvarchar]
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        out.append(buf.getvalue())
    return out


# ENCODER_PROPERTY_EXAMPLES=5000 explores further than the default run.
@pytest.mark.slow  # 3-4 s: make test-fast stays under 5 minutes
@settings(
    max_examples=int(os.environ.get("ENCODER_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(batches())
def test_random_schemas_and_rows_are_byte_identical(
    case: tuple[dict[str, Any], pa.Table, list[Kind]],
) -> None:
    schema, table, kinds = case
    enc = AvroEncoder(schema)
    assert enc.encode(table) == expected(schema, table, kinds)
    buf, offsets = enc.encode_buffer(table)
    assert len(offsets) == table.num_rows + 1 and int(offsets[-1]) == len(buf)
