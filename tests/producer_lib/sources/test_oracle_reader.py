import asyncio

import oracledb
import pytest

from producer_lib.errors import SourceError
from producer_lib.schema import (
    AvroBytes,
    AvroCLOB,
    AvroDecimal,
    AvroDouble,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroNCLOB,
    AvroNVarchar,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroVarchar,
    ValueSchema,
)  # fmt: skip
from producer_lib.sources import OracleReader
from producer_lib.sources.dictionary import apply_dictionary, source_table_of
from producer_lib.sources.oracle import owner_and_table
from producer_lib.sources.oracle_dictionary import (
    avro_type_for_description,
    avro_type_for_oracle,
    dictionary_from_rows,
)


@pytest.mark.parametrize(
    ("data_type", "precision", "scale", "length", "expected"),
    [
        ("NUMBER", 9, 0, None, AvroInt()),
        ("NUMBER", 18, 0, None, AvroLong()),
        ("NUMBER", 22, 0, None, AvroDecimal(22, 0)),
        ("NUMBER", 10, 2, None, AvroDecimal(10, 2)),
        ("NUMBER", None, None, None, AvroDecimal(38, 10)),
        ("NUMBER", 126, -127, None, AvroDouble()),
        ("FLOAT", 126, None, None, AvroDouble()),
        ("BINARY_FLOAT", None, None, None, AvroFloat()),
        ("BINARY_DOUBLE", None, None, None, AvroDouble()),
        ("VARCHAR2", None, None, 40, AvroVarchar(40)),
        ("CHAR", None, None, 1, AvroVarchar(1)),
        ("NVARCHAR2", None, None, 100, AvroNVarchar(100)),
        ("NCHAR", None, None, 2, AvroNVarchar(2)),
        ("CLOB", None, None, None, AvroCLOB()),
        ("NCLOB", None, None, None, AvroNCLOB()),
        ("DATE", None, None, None, AvroTimestamp()),
        ("TIMESTAMP(6)", None, 6, None, AvroTimestampMicros()),
        ("TIMESTAMP(6) WITH TIME ZONE", None, 6, None, AvroTimestampMicros()),
        ("TIMESTAMP(3) WITH LOCAL TIME ZONE", None, 3, None, AvroTimestampMicros()),
        ("RAW", None, None, 16, AvroBytes()),
        ("BLOB", None, None, None, AvroBytes()),
    ],
    ids=lambda v: str(v),
)
def test_oracle_type_mapping(data_type, precision, scale, length, expected):
    assert avro_type_for_oracle(data_type, precision, scale, length) == expected


def test_unsupported_type_names_column_and_type():
    with pytest.raises(SourceError) as info:
        avro_type_for_oracle("XMLTYPE", column="DOC")
    assert (info.value.column, info.value.oracle_type) == ("DOC", "XMLTYPE")


def test_description_entries_use_oracledb_type_names():
    def entry(name, db_type, size, precision, scale):
        return (name, db_type, size, size, precision, scale, True)

    assert avro_type_for_description(entry("ID", oracledb.DB_TYPE_NUMBER, 0, 10, 0)) == AvroLong()
    assert avro_type_for_description(entry("N", oracledb.DB_TYPE_NVARCHAR, 30, 0, 0)) == (
        AvroNVarchar(30)
    )
    assert avro_type_for_description(entry("T", oracledb.DB_TYPE_TIMESTAMP_TZ, 0, 0, 6)) == (
        AvroTimestampMicros()
    )


def test_dictionary_rows_become_keys_and_comments():
    constraints = [
        ("SAMPLE_PLAN_PK", "P", "PLAN_ID", 1, None, None, None),
        ("SAMPLE_PLAN_PK", "P", "VERSION", 2, None, None, None),
        ("SP_PLANT_FK", "R", "PLANT_ID", 1, "LIMSPRD", "PLANT", "ID"),
        ("SP_PLANT_FK", "R", "SITE", 2, "LIMSPRD", "PLANT", "SITE"),
    ]
    comments = [("NAME", "Plan name"), ("PLAN_ID", None)]
    dictionary = dictionary_from_rows(constraints, comments, "Sample plans")
    schema = ValueSchema("SAMPLE_PLAN", "LABWARE")
    for column in ("PLAN_ID", "VERSION", "NAME", "PLANT_ID", "SITE"):
        schema.add_field(column, AvroLong())
    apply_dictionary(schema, dictionary)
    assert schema.pks == ("PLAN_ID", "VERSION")
    [fk] = schema.foreign_keys
    assert (fk.columns, fk.ref_namespace, fk.ref_table, fk.ref_columns) == (
        ("PLANT_ID", "SITE"),
        "LIMSPRD",
        "PLANT",
        ("ID", "SITE"),
    )
    assert schema.field("NAME").doc == "Plan name"
    assert schema.field("PLAN_ID").doc is None
    assert schema.doc == "Sample plans"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select * from LIMSPRD.SAMPLE_PLAN", ("LIMSPRD", "SAMPLE_PLAN")),
        ("select * from limsprd.sample_plan", ("LIMSPRD", "SAMPLE_PLAN")),
        ('select * from "LimsPrd"."Mixed"', ("LimsPrd", "Mixed")),
        ("select * from sample_plan", ("FLOW_USER", "SAMPLE_PLAN")),
    ],
    ids=["upper", "folded", "quoted", "current-schema"],
)
def test_dictionary_names_follow_oracle_identifier_rules(sql, expected):
    assert owner_and_table(source_table_of(sql, "oracle"), "FLOW_USER") == expected


def test_unreachable_server_is_a_source_error_without_the_password():
    async def run():
        async with OracleReader("u", "s3cret-pw", "127.0.0.1:1/nothing") as reader:
            await reader.load("T", "select 1 from dual", "NS")

    with pytest.raises(SourceError, match="Cannot connect to Oracle") as info:
        asyncio.run(run())
    assert "s3cret-pw" not in str(info.value)
