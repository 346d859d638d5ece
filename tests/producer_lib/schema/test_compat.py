"""Two value schemas of one table: which column types Delta can merge."""

from __future__ import annotations

import pytest

from producer_lib.schema import (
    AvroDate,
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroString,
    AvroTimestamp,
    AvroVarchar,
    ValueSchema,
)
from producer_lib.schema.compat import ColumnClash, column_clashes, delta_types_merge


@pytest.mark.parametrize(
    ("a", "b", "merge"),
    [
        pytest.param("STRING", "STRING", True, id="equal"),
        pytest.param("INT", "BIGINT", True, id="int-widens-to-bigint"),
        pytest.param("BIGINT", "TINYINT", True, id="either-direction"),
        pytest.param("FLOAT", "DOUBLE", True, id="float-double"),
        pytest.param("DATE", "TIMESTAMP_NTZ", True, id="date-timestamp-ntz"),
        pytest.param("DECIMAL(10,2)", "DECIMAL(12,2)", True, id="decimal-more-digits"),
        pytest.param("DECIMAL(10,2)", "DECIMAL(12,4)", True, id="decimal-more-scale-and-digits"),
        pytest.param("DECIMAL(10,2)", "DECIMAL(10,4)", False, id="decimal-loses-integer-digits"),
        pytest.param("INT", "DECIMAL(10,0)", True, id="int-into-decimal"),
        pytest.param("BIGINT", "DECIMAL(10,0)", False, id="bigint-does-not-fit-decimal-10"),
        pytest.param("STRING", "BIGINT", False, id="string-bigint"),
        pytest.param("DATE", "INT", False, id="date-int"),
        pytest.param("DATE", "TIMESTAMP", False, id="date-timestamp-ltz"),
        pytest.param("ARRAY<INT>", "ARRAY<BIGINT>", False, id="nested-types-must-be-equal"),
        pytest.param("map<string, int>", "MAP<STRING,INT>", True, id="spelling-ignored"),
    ],
)
def test_delta_types_merge(a, b, merge):
    assert delta_types_merge(a, b) is merge


def _schema(**columns) -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    for name, avro_type in columns.items():
        schema.add_field(name, avro_type)
    return schema


def test_column_clashes_names_each_clashing_column_with_both_types():
    mine = _schema(ID=AvroLong(), NAME=AvroString(), DAY=AvroDate(), ONLY_MINE=AvroInt())
    theirs = _schema(id=AvroString(), NAME=AvroVarchar(20), DAY=AvroTimestamp(), OTHER=AvroInt())
    assert column_clashes(mine, theirs) == [
        ColumnClash("ID", "BIGINT", "STRING"),  # names compare case-insensitively, as in Delta
        ColumnClash("DAY", "DATE", "TIMESTAMP"),
    ]


def test_column_clashes_none_when_types_merge():
    mine = _schema(ID=AvroInt(), PRICE=AvroDecimal(10, 2), NAME=AvroVarchar(10))
    theirs = _schema(ID=AvroLong(), PRICE=AvroDecimal(12, 2), NAME=AvroVarchar(40))
    assert column_clashes(mine, theirs) == []
