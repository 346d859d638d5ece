import asyncio
import logging

import duckdb
import pyarrow as pa
import pytest

from producer_lib.errors import SourceError
from producer_lib.schema import AvroDecimal, AvroLong, AvroString, ForeignKey, ValueSchema
from producer_lib.sources import SourceAdapter
from producer_lib.sources.dictionary import (
    DataDictionary,
    apply_dictionary,
    source_table_of,
)


def _schema():
    schema = ValueSchema("PAGES", "TEST")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroString())
    schema.add_field("PRICE", AvroDecimal(10, 2))
    return schema


def test_insert_page_from_many_concurrent_tasks_keeps_every_row():
    conn = duckdb.connect()

    async def run():
        async with SourceAdapter(connection=conn) as adapter:
            arrow_schema = adapter.prepare_load("PAGES", _schema())
            assert arrow_schema.names == ["ID", "NAME", "PRICE"]

            async def page(n):
                ids = list(range(n * 100, n * 100 + 100))
                table = pa.table({"ID": ids, "NAME": [f"n{i}" for i in ids]})
                await asyncio.sleep(0)
                return adapter.insert_page("PAGES", table)

            counts = await asyncio.gather(*(page(n) for n in range(50)))
            adapter.check_primary_key("PAGES", _with_key(_schema()))
            return sum(counts)

    assert asyncio.run(run()) == 5000
    assert conn.execute('select count(*), count(distinct "ID") from "PAGES"').fetchone() == (
        5000,
        5000,
    )


def _with_key(schema):
    schema.add_primary_key("ID")
    return schema


def test_default_connection_is_shared_with_duckdb_sql():
    async def run():
        async with SourceAdapter() as adapter:
            adapter.prepare_load("SHARED_T", _schema())
            adapter.insert_page("SHARED_T", pa.table({"ID": [1, 2]}))

    asyncio.run(run())
    assert duckdb.sql('select sum("ID") from SHARED_T').fetchone() == (3,)
    duckdb.execute("drop table SHARED_T")


def test_page_with_unknown_column_names_the_table():
    async def run():
        async with SourceAdapter(connection=duckdb.connect()) as adapter:
            adapter.prepare_load("T", _schema())
            adapter.insert_page("T", pa.table({"NOPE": [1]}))

    with pytest.raises(SourceError) as info:
        asyncio.run(run())
    assert info.value.table == "T"


def test_table_schema_before_load_is_a_clear_error():
    with pytest.raises(SourceError, match="call load"):
        _ = SourceAdapter(connection=duckdb.connect()).table_schema


def test_augment_failure_is_logged_not_raised(caplog):
    class Broken(SourceAdapter):
        async def _describe(self, sql, name, namespace):
            return _schema()

        async def _augment(self, schema, sql):
            raise RuntimeError("dictionary unreachable")

        async def _copy(self, table, sql, arrow_schema):
            self.insert_page(table, pa.table({"ID": [1]}))

    async def run():
        async with Broken(logging.getLogger("flow"), connection=duckdb.connect()) as reader:
            return await reader.load("T", "select 1", "NS", "SYS")

    with caplog.at_level(logging.INFO, logger="flow"):
        schema = asyncio.run(run())
    assert schema.pks == ()
    assert "dictionary unreachable" in caplog.text
    assert "loaded table=T rows=1" in caplog.text


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select * from LIMSPRD.SAMPLE_PLAN", ("LIMSPRD", "SAMPLE_PLAN")),
        ('select a from "My Schema".t where x = 1', ("My Schema", "t")),
        ("with q as (select * from s.t) select * from q", ("s", "t")),
        ("select * from a join b on a.id = b.id", None),
        ("not sql at all (", None),
    ],
    ids=["qualified", "quoted", "cte", "join", "garbage"],
)
def test_source_table_of(sql, expected):
    found = source_table_of(sql, "postgres")
    assert (found and (found.schema, found.name)) == expected


def test_dictionary_applies_only_keys_whose_columns_are_projected():
    schema = _schema()
    apply_dictionary(
        schema,
        DataDictionary(
            primary_key=("id",),
            foreign_keys=(
                ForeignKey(("NAME",), "TEST", "NAMES", ("N",)),
                ForeignKey(("MISSING",), "TEST", "X", ("Y",)),
            ),
            column_comments={"price": "net price", "MISSING": "x"},
            table_comment="pages",
        ),
    )
    assert schema.pks == ("ID",)
    assert [fk.ref_table for fk in schema.foreign_keys] == ["NAMES"]
    assert schema.field("PRICE").doc == "net price"
    assert schema.doc == "pages"
