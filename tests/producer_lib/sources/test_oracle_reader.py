import asyncio
from datetime import UTC, datetime
from decimal import Decimal

import duckdb
import oracledb
import pyarrow as pa
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
)
from producer_lib.sources import OracleReader
from producer_lib.sources.dictionary import apply_dictionary, source_table_of
from producer_lib.sources.oracle import ArrowFetch, owner_and_table
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


# -- the Arrow fetch, against the DuckDB stand-in of python-oracledb ----------------------

KINDS_TYPES = {  # Oracle types of the stand-in's columns, beyond its defaults
    "TS": (oracledb.DB_TYPE_TIMESTAMP, 0, 0, 6),
    "NOTE": (oracledb.DB_TYPE_CLOB, 0, 0, 0),
    "HASH": (oracledb.DB_TYPE_RAW, 16, 0, 0),
    "LOOSE": (oracledb.DB_TYPE_NUMBER, 0, 0, -127),  # NUMBER without precision
}
KINDS_SQL = """
CREATE TABLE KINDS (ID BIGINT, SMALL INTEGER, BIG DECIMAL(22,0), AMOUNT DECIMAL(10,2),
    RATE DOUBLE, D TIMESTAMP, TS TIMESTAMP, TSTZ TIMESTAMPTZ, NAME VARCHAR, NOTE VARCHAR,
    PHOTO BLOB, HASH BLOB, LOOSE DECIMAL(38,20));
INSERT INTO KINDS SELECT i, i * 1000, '100000000000000000000'::DECIMAL(22,0) + i, i + 0.25, i / 4,
    TIMESTAMP '2024-05-01 08:00:00' + INTERVAL (i) DAY,
    TIMESTAMP '2024-05-01 08:00:00.123456' + INTERVAL (i) SECOND,
    TIMESTAMPTZ '2024-05-01 08:00:00+02:00' + INTERVAL (i) HOUR,
    'n' || i, repeat('long text ', 500) || i, ('\\x00\\xFF' || i)::BLOB,
    ('\\xAB\\xCD' || i)::BLOB, i / 8
FROM range(1, 11) t(i);
"""


@pytest.fixture
def oracle(monkeypatch):
    """The DuckDB stand-in behind ``oracledb.connect_async``, holding table KINDS."""
    from tests.support.oracle_standin import Connection

    db = duckdb.connect()
    db.execute(KINDS_SQL)
    connections = []

    async def connect_async(*, user, password, dsn):
        connections.append(Connection(db, user, KINDS_TYPES))
        return connections[-1]

    monkeypatch.setattr(oracledb, "connect_async", connect_async)
    return connections


def load_kinds(sql="select * from KINDS", page_size=3):
    staging = duckdb.connect()

    async def run():
        async with OracleReader(
            "u", "pw", "standin:1521/X", connection=staging, page_size=page_size
        ) as reader:
            return await reader.load("KINDS", sql, "NS")

    return asyncio.run(run()), staging


def test_rows_arrive_as_arrow_batches_with_exact_types(oracle, monkeypatch):
    from tests.support import oracle_standin

    async def no_rows(*args, **kwargs):
        raise AssertionError("the reader fetched Python rows")

    monkeypatch.setattr(oracle_standin.Cursor, "fetchmany", no_rows)
    _, staging = load_kinds()
    [connection] = oracle
    assert connection.batch_rows == [3, 3, 3, 1]  # page_size rows per data frame
    types = dict(
        staging.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'KINDS'"
        ).fetchall()
    )
    assert types == {
        "ID": "BIGINT",
        "SMALL": "INTEGER",
        "BIG": "DECIMAL(22,0)",
        "AMOUNT": "DECIMAL(10,2)",
        "RATE": "DOUBLE",
        "D": "TIMESTAMP WITH TIME ZONE",
        "TS": "TIMESTAMP WITH TIME ZONE",
        "TSTZ": "TIMESTAMP WITH TIME ZONE",
        "NAME": "VARCHAR",
        "NOTE": "VARCHAR",
        "PHOTO": "BLOB",
        "HASH": "BLOB",
        "LOOSE": "DECIMAL(38,10)",
    }
    row = staging.sql('SELECT * FROM "KINDS" WHERE "ID" = 7').to_arrow_table().to_pylist()[0]
    assert (row["SMALL"], row["BIG"], row["AMOUNT"], row["RATE"]) == (
        7000,
        Decimal(10**20 + 7),
        Decimal("7.25"),
        1.75,
    )
    assert row["D"] == datetime(2024, 5, 8, 8, 0, tzinfo=UTC)  # DATE: read as UTC
    assert row["TS"] == datetime(2024, 5, 1, 8, 0, 7, 123456, tzinfo=UTC)
    assert row["TSTZ"] == datetime(2024, 5, 1, 13, 0, tzinfo=UTC)  # the instant, not a wall clock
    assert row["NOTE"] == "long text " * 500 + "7"
    assert (row["PHOTO"], row["HASH"]) == (b"\x00\xff7", b"\xab\xcd7")
    assert row["LOOSE"] == Decimal("0.875")


def test_zoned_timestamps_are_fetched_as_utc_instants(oracle):
    load_kinds()
    [connection] = oracle
    [statement] = connection.statements
    assert 'SYS_EXTRACT_UTC("TSTZ") AS "TSTZ"' in statement
    assert 'SYS_EXTRACT_UTC("TS")' not in statement  # no zone, nothing to convert
    load_kinds('select "ID", "NAME" from KINDS')
    assert oracle[1].statements == ['select "ID", "NAME" from KINDS']  # as given


def test_a_value_the_column_type_cannot_hold_fails_the_load(oracle):
    with pytest.raises(SourceError, match="Reading from Oracle failed") as info:
        load_kinds("select ID, LOOSE + 0.00000000001 AS LOOSE from KINDS")
    assert info.value.table == "KINDS"


@pytest.mark.parametrize(
    ("db_type", "page_type", "requested", "landed"),
    [
        (oracledb.DB_TYPE_NUMBER, pa.decimal128(10, 2), pa.decimal128(10, 2), pa.decimal128(10, 2)),
        (oracledb.DB_TYPE_NUMBER, pa.int64(), pa.int64(), pa.int64()),
        (
            oracledb.DB_TYPE_DATE,
            pa.timestamp("ms", "UTC"),
            pa.timestamp("ms"),
            pa.timestamp("ms", "UTC"),
        ),
        (
            oracledb.DB_TYPE_TIMESTAMP_TZ,
            pa.timestamp("us", "UTC"),
            pa.timestamp("us"),
            pa.timestamp("us", "UTC"),
        ),
        (oracledb.DB_TYPE_CLOB, pa.string(), pa.large_string(), pa.large_string()),
        (oracledb.DB_TYPE_NCLOB, pa.string(), pa.large_string(), pa.large_string()),
        (oracledb.DB_TYPE_BLOB, pa.binary(), pa.large_binary(), pa.large_binary()),
        (oracledb.DB_TYPE_RAW, pa.binary(), pa.binary(), pa.binary()),
        (oracledb.DB_TYPE_VARCHAR, pa.string(), pa.string(), pa.string()),
    ],
    ids=[
        "number-p-s",
        "number-18",
        "date",
        "timestamp-tz",
        "clob",
        "nclob",
        "blob",
        "raw",
        "varchar2",
    ],
)
def test_each_oracle_type_is_requested_as_the_arrow_type_it_stages_as(
    db_type, page_type, requested, landed
):
    description = [("C", db_type, 0, 0, 0, 0, True)]
    fetch = ArrowFetch.plan(description, pa.schema([("C", page_type)]))
    assert (fetch.requested.field("C").type, fetch.landing.field("C").type) == (requested, landed)


def test_another_arrow_type_than_requested_names_the_column():
    fetch = ArrowFetch.plan(
        [("N", oracledb.DB_TYPE_NUMBER, 0, 0, 10, 2, True)],
        pa.schema([("N", pa.decimal128(10, 2))]),
    )
    with pytest.raises(SourceError, match="another Arrow type") as info:
        fetch.to_page(pa.table({"N": pa.array([1.5])}))
    assert (info.value.column, info.value.arrow_type) == ("N", "double")
