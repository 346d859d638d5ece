import asyncio
import datetime as dt
import logging
from decimal import Decimal

import duckdb
import psycopg
import pytest

from producer_lib.errors import SourceError
from producer_lib.schema import (
    AvroBoolean,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    AvroString,
    AvroTimestampMicros,
    AvroUUID,
)
from producer_lib.sources import PostgresReader

DDL = """
DROP SCHEMA IF EXISTS lims CASCADE;
CREATE SCHEMA lims;
CREATE TABLE lims.plant (plant_id int, site text, PRIMARY KEY (plant_id, site));
CREATE TABLE lims.sample_plan (
    plan_id bigint, version int, name varchar(40), price numeric(10,2), ratio float8,
    active boolean, created timestamptz, due date, doc jsonb, guid uuid, blob bytea,
    plant_id int, site text,
    PRIMARY KEY (plan_id, version),
    FOREIGN KEY (plant_id, site) REFERENCES lims.plant (plant_id, site)
);
COMMENT ON TABLE lims.sample_plan IS 'Sample plans';
COMMENT ON COLUMN lims.sample_plan.name IS 'Plan name';
INSERT INTO lims.plant VALUES (1, 'north');
INSERT INTO lims.sample_plan
SELECT g, 1, 'plan ' || g, g * 1.25, g / 4.0, g % 2 = 0, '2024-01-02 03:04:05+00', '2024-02-29',
       '{"k": 1}', '00000000-0000-0000-0000-000000000001', '\\x0102', 1, 'north'
FROM generate_series(1, 2500) g;
"""


@pytest.fixture(scope="module")
def lims(postgres_dsn):
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(DDL)
    return postgres_dsn


def _load(dsn, table, sql, **options):
    conn = duckdb.connect()

    async def run():
        async with PostgresReader(
            dsn, logging.getLogger("flow"), connection=conn, **options
        ) as reader:
            await reader.load(table, sql, "LABWARE", "LIMS")
            return reader.table_schema

    return asyncio.run(run()), conn


def test_load_maps_types_and_copies_every_row_in_pages(lims):
    schema, conn = _load(lims, "SAMPLE_PLAN", "select * from lims.sample_plan", page_size=1000)
    types = {name: f.type for name, f in schema.fields.items()}
    assert types == {
        "plan_id": AvroLong(),
        "version": AvroInt(),
        "name": AvroNVarchar(40),
        "price": AvroDecimal(10, 2),
        "ratio": AvroDouble(),
        "active": AvroBoolean(),
        "created": AvroTimestampMicros(),
        "due": AvroDate(),
        "doc": AvroString(),
        "guid": AvroUUID(),
        "blob": AvroBytes(),
        "plant_id": AvroInt(),
        "site": AvroString(),
    }
    assert conn.execute('select count(*), sum(price) from "SAMPLE_PLAN"').fetchone() == (
        2500,
        Decimal("3907812.50"),
    )
    row = conn.execute(
        'select name, epoch_us(created), due, doc, guid::varchar, blob from "SAMPLE_PLAN" '
        "where plan_id = 2"
    ).fetchone()
    assert row[0] == "plan 2"
    assert row[1] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp() * 1_000_000
    assert row[2:] == (
        dt.date(2024, 2, 29),
        '{"k": 1}',
        "00000000-0000-0000-0000-000000000001",
        b"\x01\x02",
    )


def test_augment_reads_keys_and_comments_from_the_catalog(lims):
    schema, _ = _load(
        lims,
        "SAMPLE_PLAN",
        "select plan_id, version, name, plant_id, site from lims.sample_plan where plan_id < 10",
    )
    assert schema.pks == ("plan_id", "version")
    assert schema.doc == "Sample plans"
    assert schema.field("name").doc == "Plan name"
    [fk] = schema.foreign_keys
    assert (fk.columns, fk.ref_namespace, fk.ref_table, fk.ref_columns) == (
        ("plant_id", "site"),
        "lims",
        "plant",
        ("plant_id", "site"),
    )


def test_projection_without_the_whole_key_is_append_only(lims):
    schema, _ = _load(lims, "PLANS", "select plan_id, name from lims.sample_plan")
    assert schema.pks == ()
    assert schema.field("name").doc == "Plan name"


def test_duplicate_keys_fail_before_anything_is_produced(lims):
    with pytest.raises(SourceError, match="duplicate") as info:
        _load(lims, "DUPS", "select 1 as plan_id, version from lims.sample_plan")
    assert info.value.table == "DUPS"


def test_dictionary_failure_is_logged_not_fatal(lims, caplog):
    with caplog.at_level(logging.INFO, logger="flow"):
        schema, conn = _load(
            lims,
            "J",
            "select p.plan_id from lims.sample_plan p join lims.plant t on t.plant_id = p.plant_id",
        )
    assert schema.pks == ()
    assert "not a single-table query" in caplog.text
    assert conn.execute('select count(*) from "J"').fetchone() == (2500,)


def test_bad_query_names_table_and_sql(lims):
    with pytest.raises(SourceError) as info:
        _load(lims, "BAD", "select nope from lims.sample_plan")
    assert info.value.table == "BAD" and "nope" in str(info.value)


def test_unsupported_type_names_the_column(lims):
    with pytest.raises(SourceError) as info:
        _load(lims, "IV", "select interval '1 day' as span")
    assert info.value.column == "span"
