"""No value altered without an error: text length, float32 range and Unicode, on every path.

The encoder has three ways into fastavro-identical bytes: the column path (whole Arrow
columns), the per-row path (fastavro, for types the column path does not read, such as
arrays) and constants. A value that breaks a rule is refused the same way on each, naming
table, column, row and key; truncation happens only when asked for, and is counted.
"""

from __future__ import annotations

import io
import math
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from producer_lib import AvroNVarchar, ValueSchema
from producer_lib.errors import EncodeError
from producer_lib.schema import (
    AvroArray,
    AvroEncoder,
    AvroFloat,
    AvroLong,
    AvroVarchar,
    KeySchema,
)
from producer_lib.schema.rows import rows_to_arrow

FLOAT32_MAX = float(np.finfo(np.float32).max)


def plan_schema(text_type: Any, truncate_text: bool = False) -> ValueSchema:
    schema = ValueSchema("SAMPLE_PLAN", "LABWARE", truncate_text=truncate_text)
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("/BIC/NAME", text_type)  # Avro name differs: counts use the original
    schema.add_field("TAGS", AvroArray(text_type))  # per-row path (fastavro)
    schema.pks = ["ID"]
    return schema


def payload(names: list[Any], tags: list[Any]) -> pa.Table:
    return pa.table(
        {"ID": pa.array(range(10, 10 + len(names)), pa.int64()), "/BIC/NAME": names, "TAGS": tags}
    )


def encode(schema: ValueSchema, batch: pa.Table, **kwargs: Any) -> list[bytes]:
    return AvroEncoder(schema.to_avro_json(), **kwargs).encode(batch, technical())


def technical() -> dict[str, Any]:
    return {"__change_type": "R", "__change_time": 0, "__source_system": "test"}


def fastavro_rows(schema: ValueSchema, batch: pa.Table) -> list[bytes]:
    parsed = fastavro.parse_schema(schema.to_avro_json())
    out = []
    for row in batch.to_pylist():
        buf = io.BytesIO()
        avro_row = {schema.field(n).avro_name: v for n, v in row.items()}
        fastavro.schemaless_writer(buf, parsed, avro_row | technical())
        out.append(buf.getvalue())
    return out


def refused(schema: ValueSchema, batch: pa.Table, constants: Any = None) -> EncodeError:
    with pytest.raises(EncodeError) as info:
        AvroEncoder(schema.to_avro_json()).encode(batch, constants or technical())
    return info.value


# -- text longer than its length --------------------------------------------------------


@pytest.mark.parametrize(
    "text_type", [AvroNVarchar(3), AvroVarchar(3)], ids=["nvarchar", "varchar"]
)
def test_over_length_text_is_refused_on_the_column_path(text_type: Any) -> None:
    schema = plan_schema(text_type)
    err = refused(schema, payload(["abc", None, "abcd"], [[], [], []]))
    assert err.context["table"] == "LABWARE.SAMPLE_PLAN"
    assert err.context["column"] == "/BIC/NAME"
    assert err.context["row"] == 2
    assert err.context["key"] == {"ID": 12}
    assert "4 characters is longer than 3" in str(err) and "truncate=True" in str(err)


@pytest.mark.parametrize(
    "text_type", [AvroNVarchar(3), AvroVarchar(3)], ids=["nvarchar", "varchar"]
)
def test_over_length_text_is_refused_on_the_per_row_path(text_type: Any) -> None:
    schema = plan_schema(text_type)
    err = refused(schema, payload(["a", "b"], [["abc"], ["ok", "abcd"]]))
    assert err.context["table"] == "LABWARE.SAMPLE_PLAN"
    assert (err.context["column"], err.context["row"], err.context["key"]) == (
        "TAGS",
        1,
        {"ID": 11},
    )
    assert "4 characters is longer than 3" in str(err)


def test_over_length_constant_is_refused() -> None:
    schema = ValueSchema("T", "N")
    schema.add_field("ID", AvroLong())
    avro = schema.to_avro_json()
    avro["fields"][0] = {
        "name": "ID",
        "type": {"type": "string", "logicalType": "NVARCHAR", "length": 2},
    }
    with pytest.raises(EncodeError) as info:
        AvroEncoder(avro).encode(pa.table({"x": [1]}), {"ID": "abc"} | technical())
    assert info.value.context["table"] == "N.T" and "longer than 2" in str(info.value)


def test_a_long_value_is_shown_cut_in_the_error() -> None:
    err = refused(plan_schema(AvroNVarchar(3)), payload(["x" * 100_000], [[]]))
    assert len(str(err)) < 600


def test_refusal_is_the_default_and_nothing_is_counted() -> None:
    encoder = AvroEncoder(plan_schema(AvroNVarchar(3)).to_avro_json())
    with pytest.raises(EncodeError):
        encoder.encode(payload(["abcd"], [[]]), technical())
    assert encoder.truncations == {}


@pytest.mark.parametrize(
    ("opt_in", "text_type", "kwargs"),
    [
        ("type", AvroNVarchar(3, truncate=True), {}),
        ("type-varchar", AvroVarchar(3, truncate=True), {}),
        ("schema", AvroNVarchar(3), {"truncate_text": True}),
        ("encoder", AvroNVarchar(3), {}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_truncation_opted_in_cuts_counts_and_matches_fastavro(
    opt_in: str, text_type: Any, kwargs: dict[str, Any]
) -> None:
    schema = plan_schema(text_type, **kwargs)
    batch = payload(["abcd", "ab", None, "abcdef"], [["abcd", "x"], [], None, ["abcde"]])
    encoder = AvroEncoder(schema.to_avro_json(), truncate_text=opt_in == "encoder")
    got = encoder.encode(batch, technical())
    cut = payload(["abc", "ab", None, "abc"], [["abc", "x"], [], None, ["abc"]])
    assert got == fastavro_rows(plan_schema(AvroNVarchar(3)), cut)
    assert encoder.truncations == {"/BIC/NAME": 2, "TAGS": 2}
    assert encoder.take_truncations() == {"/BIC/NAME": 2, "TAGS": 2}
    encoder.encode(batch.slice(0, 1), technical())
    assert encoder.truncations == {"/BIC/NAME": 3, "TAGS": 3}
    assert encoder.take_truncations() == {"/BIC/NAME": 1, "TAGS": 1}
    assert encoder.take_truncations() == {}


def test_nvarchar_truncates_by_characters_not_bytes() -> None:
    schema = plan_schema(AvroNVarchar(3, truncate=True))
    batch = payload(["日本語です", "😀😀😀😀"], [["日本語です"], []])
    encoder = AvroEncoder(schema.to_avro_json())
    got = encoder.encode(batch, technical())
    assert got == fastavro_rows(schema, payload(["日本語", "😀😀😀"], [["日本語"], []]))


def test_a_failed_batch_counts_no_truncation() -> None:
    schema = plan_schema(AvroNVarchar(3, truncate=True))
    schema.add_field("F", AvroFloat())
    batch = payload(["abcd"], [["abcd"]]).append_column("F", pa.array([1e300]))
    encoder = AvroEncoder(schema.to_avro_json())
    with pytest.raises(EncodeError):
        encoder.encode(batch, technical())
    assert encoder.truncations == {}


def test_truncate_opt_ins_survive_the_schema_json_and_reach_the_key() -> None:
    schema = plan_schema(AvroNVarchar(3, truncate=True), truncate_text=True)
    restored = ValueSchema.from_avro_json(schema.to_json())
    assert restored == schema and restored.truncate_text
    assert restored.field("/BIC/NAME").type == AvroNVarchar(3, truncate=True)
    assert KeySchema(schema).to_avro_json()["truncateText"] is True
    untouched = plan_schema(AvroNVarchar(3)).to_avro_json()
    assert "truncateText" not in untouched and "truncate" not in str(untouched["fields"][1])


# -- float32 range ----------------------------------------------------------------------


def float_schema() -> ValueSchema:
    schema = ValueSchema("MEASURE", "LAB")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("F", AvroFloat())
    schema.add_field("FS", AvroArray(AvroFloat()))  # per-row path
    schema.pks = ("ID",)
    return schema


@pytest.mark.parametrize("big", [1e300, -1e39, 3.5e38], ids=["1e300", "-1e39", "3.5e38"])
@pytest.mark.parametrize("path", ["column", "per-row"])
def test_a_finite_float_beyond_float32_is_refused_not_made_inf(path: str, big: float) -> None:
    f, fs = ([1.0, big], [[], []]) if path == "column" else ([1.0, 2.0], [[1.0], [0.5, big]])
    batch = pa.table({"ID": pa.array([7, 8], pa.int64()), "F": f, "FS": fs})
    err = refused(float_schema(), batch)
    assert "overflows Avro float" in str(err) and "AvroDouble" in str(err)
    assert err.context["table"] == "LAB.MEASURE"
    assert err.context["column"] == ("F" if path == "column" else "FS")
    assert (err.context["row"], err.context["key"]) == (1, {"ID": 8})


def test_a_float_constant_beyond_float32_is_refused() -> None:
    with pytest.raises(EncodeError, match="overflows Avro float"):
        AvroEncoder(float_schema().to_avro_json()).encode(
            pa.table({"ID": [1], "FS": pa.array([[]], pa.list_(pa.float64()))}),
            {"F": 1e300} | technical(),
        )


def test_nan_inf_and_float32_max_pass_unchanged_on_both_paths() -> None:
    values = [math.nan, math.inf, -math.inf, FLOAT32_MAX, 3.4028235e38, -3.4028235e38]
    batch = pa.table(
        {
            "ID": pa.array(range(len(values)), pa.int64()),
            "F": pa.array(values, pa.float64()),
            "FS": pa.array([[v] for v in values], pa.list_(pa.float64())),
        }
    )
    got = encode(float_schema(), batch)
    assert got == fastavro_rows(float_schema(), batch)
    decoded = [
        fastavro.schemaless_reader(io.BytesIO(b), float_schema().to_avro_json()) for b in got
    ]
    assert [math.isinf(r["F"]) for r in decoded] == [False, True, True, False, False, False]


# -- text that is not Unicode -----------------------------------------------------------


def invalid_utf8_strings() -> pa.Array:
    """["ok", "a" + lone surrogate U+D800 as bytes]: Arrow cannot build it from Python."""
    offsets = pa.py_buffer(np.array([0, 2, 6], np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"oka\xed\xa0\x80")])


def test_invalid_utf8_is_refused_on_the_column_path() -> None:
    schema = plan_schema(AvroNVarchar(10))
    err = refused(schema, payload(invalid_utf8_strings(), [[], []]))
    assert "not valid Unicode" in str(err)
    assert (err.context["column"], err.context["row"], err.context["key"]) == (
        "/BIC/NAME",
        1,
        {"ID": 11},
    )


def test_invalid_utf8_is_refused_on_the_per_row_path() -> None:
    tags = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), invalid_utf8_strings())
    err = refused(plan_schema(AvroNVarchar(10)), payload(["a", "b"], tags))
    assert "not valid Unicode" in str(err)
    assert (err.context["column"], err.context["row"]) == ("TAGS", 1)


def test_a_lone_surrogate_in_a_constant_is_refused_in_plain_words() -> None:
    schema = ValueSchema("T", "N")
    schema.add_field("ID", AvroLong())
    with pytest.raises(EncodeError) as info:
        AvroEncoder(schema.to_avro_json()).encode(
            pa.table({"ID": [1]}), technical() | {"__source_system": "x\ud800"}
        )
    assert "lone surrogate U+D800" in str(info.value)
    assert info.value.context["column"] == "__source_system"


# -- Python rows (produce_row) ------------------------------------------------------------


def test_rows_to_arrow_names_the_column_and_row_of_a_lone_surrogate() -> None:
    schema = plan_schema(AvroNVarchar(10)).get_pyarrow(technical=False)
    rows = [{"ID": 1, "/BIC/NAME": "fine"}, {"ID": 2, "/BIC/NAME": "bad \ud800 text"}]
    with pytest.raises(EncodeError) as info:
        rows_to_arrow(rows, schema, table="LABWARE.SAMPLE_PLAN")
    assert "lone surrogate U+D800 at character 4" in str(info.value)
    assert info.value.context == {"table": "LABWARE.SAMPLE_PLAN", "column": "/BIC/NAME", "row": 1}


def test_rows_to_arrow_keeps_a_float32_overflow_for_the_encoder_to_refuse() -> None:
    schema = float_schema()
    rows = [{"ID": 1, "F": 1e300, "FS": [2.5]}]
    assert pa.Table.from_pylist(rows, schema.get_pyarrow(technical=False))["F"][0].as_py() == (
        math.inf  # what a plain from_pylist does: the reason rows_to_arrow exists
    )
    table = rows_to_arrow(rows, schema.get_pyarrow(technical=False), table="LAB.MEASURE")
    assert table["F"].to_pylist() == [1e300] and table["FS"].type.value_type == pa.float64()
    with pytest.raises(EncodeError, match="overflows Avro float") as info:
        AvroEncoder(schema.to_avro_json()).encode(table, technical())
    assert info.value.context["row"] == 0 and info.value.context["key"] == {"ID": 1}


def test_rows_to_arrow_encodes_like_from_pylist_when_values_fit() -> None:
    schema = float_schema()
    rows = [{"ID": 1, "F": 0.1, "FS": [1 / 3, 2.5]}, {"ID": 2}]
    arrow = schema.get_pyarrow(technical=False)
    encoder = AvroEncoder(schema.to_avro_json())
    expected = encoder.encode(pa.Table.from_pylist(rows, arrow), technical())
    assert encoder.encode(rows_to_arrow(rows, arrow), technical()) == expected


def test_rows_to_arrow_names_a_value_of_the_wrong_type() -> None:
    arrow = float_schema().get_pyarrow(technical=False)
    with pytest.raises(EncodeError) as info:
        rows_to_arrow([{"ID": 1}, {"ID": "two"}], arrow, table="LAB.MEASURE")
    assert info.value.context == {"table": "LAB.MEASURE", "column": "ID", "row": 1}


def test_rows_to_arrow_takes_a_cursors_tuples_in_column_order() -> None:
    arrow = float_schema().get_pyarrow(technical=False)
    by_name = [{"ID": 1, "F": 0.5, "FS": [1.5]}, {"ID": 2}]
    in_order = [(1, 0.5, [1.5]), (2, None, None)]
    assert rows_to_arrow(in_order, arrow).equals(rows_to_arrow(by_name, arrow))
    with pytest.raises(EncodeError) as info:
        rows_to_arrow([(1, 0.5, []), (2, "x", [])], arrow, table="LAB.MEASURE")
    assert info.value.context == {"table": "LAB.MEASURE", "column": "F", "row": 1}
    with pytest.raises(EncodeError, match=r"rows have \[2, 3\] values, the schema 3 columns"):
        rows_to_arrow([(1, 0.5, []), (2, 0.5)], arrow, table="LAB.MEASURE")
