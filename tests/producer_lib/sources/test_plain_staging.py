"""prepare_load and insert_page as the documentation uses them: plain calls from tasks and
threads, awaited calls from code written when they were coroutines; readers that override
load or their own __aenter__/__aexit__; augment_schema after load."""

from __future__ import annotations

import asyncio
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa
import pytest

from producer_lib._deprecation import FlowPlatformDeprecationWarning
from producer_lib.schema import AvroLong, AvroString, ForeignKey, ValueSchema
from producer_lib.sources import SourceAdapter
from producer_lib.sources.dictionary import DataDictionary, apply_dictionary

PAGES, ROWS_PER_PAGE = 50, 20


def _schema() -> ValueSchema:
    schema = ValueSchema("PAGES", "TEST")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroString())
    return schema


def _page(n: int) -> pa.Table:
    ids = list(range(n * ROWS_PER_PAGE, (n + 1) * ROWS_PER_PAGE))
    return pa.table({"ID": ids, "NAME": [f"n{i}" for i in ids]})


def _count(conn: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    return conn.execute('select count(*), count(distinct "ID") from "PAGES"').fetchone()


def test_insert_page_without_await_from_50_concurrent_tasks_keeps_every_row():
    conn = duckdb.connect()

    async def run():
        async with SourceAdapter(connection=conn) as adapter:
            arrow_schema = adapter.prepare_load("PAGES", _schema())  # plain, as documented
            assert isinstance(arrow_schema, pa.Schema)

            async def load_page(n):
                await asyncio.sleep(0.001 * (n % 5))  # interleave the tasks
                return adapter.insert_page("PAGES", _page(n))

            return await asyncio.gather(*(load_page(n) for n in range(PAGES)))

    counts = asyncio.run(run())
    assert counts == [ROWS_PER_PAGE] * PAGES
    assert _count(conn) == (PAGES * ROWS_PER_PAGE, PAGES * ROWS_PER_PAGE)


def test_insert_page_from_threads_keeps_every_row():
    conn = duckdb.connect()
    adapter = SourceAdapter(connection=conn)
    adapter.prepare_load("PAGES", _schema())
    start = threading.Barrier(8)

    def load_page(n):
        if n < 8:
            start.wait(timeout=10)  # the first eight pages start together
        return adapter.insert_page("PAGES", _page(n))

    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(load_page, range(PAGES)))
    assert sum(counts) == PAGES * ROWS_PER_PAGE
    assert _count(conn) == (PAGES * ROWS_PER_PAGE, PAGES * ROWS_PER_PAGE)


def test_awaited_calls_of_code_written_for_coroutines_still_work_and_are_deprecated():
    conn = duckdb.connect()

    async def run():
        async with SourceAdapter(connection=conn) as adapter:
            arrow_schema = await adapter.prepare_load("PAGES", _schema())
            assert arrow_schema.names == ["ID", "NAME"]
            first = await adapter.insert_page("PAGES", _page(0))
            rest = await asyncio.gather(
                *(adapter.insert_page("PAGES", _page(n)) for n in range(1, PAGES))
            )
            return [first, *rest]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = asyncio.run(run())
    assert counts == [ROWS_PER_PAGE] * PAGES and all(isinstance(c, int) for c in counts)
    assert _count(conn) == (PAGES * ROWS_PER_PAGE, PAGES * ROWS_PER_PAGE)
    ours = [w for w in caught if issubclass(w.category, FlowPlatformDeprecationWarning)]
    assert {str(w.message) for w in ours} == {
        f"awaiting SourceAdapter.{name} is deprecated and will be removed in flow-platform "
        "1.0.0; use a plain call instead"
        for name in ("prepare_load", "insert_page")
    }
    assert [w.filename for w in ours[:2]] == [__file__] * 2  # a direct await is shown
    assert len(ours) >= 3  # gather awaits equal counts once (it keys its futures by them)


def test_plain_calls_warn_nothing():
    conn = duckdb.connect()

    async def run():
        async with SourceAdapter(connection=conn) as adapter:
            arrow_schema = adapter.prepare_load("PAGES", _schema())
            assert isinstance(arrow_schema, pa.Schema)
            return [adapter.insert_page("PAGES", _page(n)) for n in range(PAGES)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counts = asyncio.run(run())
    assert counts == [ROWS_PER_PAGE] * PAGES


class PagedReader(SourceAdapter):
    """A reader that overrides load itself, as the documentation's StarTekReader does."""

    async def load(self, duckdb_table_name, table_schema, *args, **kwargs):
        pa_schema = self.prepare_load(duckdb_table_name, table_schema)
        tasks = [self.load_page(n, duckdb_table_name, pa_schema) for n in range(3)]
        return await asyncio.gather(*tasks)

    async def load_page(self, page, duckdb_table_name, schema) -> int:
        data = [{"ID": page, "NAME": f"page {page}"}]
        self.insert_page(duckdb_table_name, pa.Table.from_pylist(data, schema=schema))
        return len(data)


def test_a_reader_that_overrides_load_gets_table_schema_from_prepare_load():
    conn = duckdb.connect()
    schema = _schema()

    async def run():
        async with PagedReader(connection=conn) as reader:
            assert await reader.load("PAGES", schema) == [1, 1, 1]
            return reader.table_schema

    assert asyncio.run(run()) is schema
    assert conn.execute('select count(*) from "PAGES"').fetchone() == (3,)


class OwnSession(SourceAdapter):
    """Own __aenter__/__aexit__ without super(), as the documentation's StarTekReader has."""

    def __init__(self) -> None:
        super().__init__(connection=duckdb.connect())
        self._session = None
        self.opened = 0

    async def __aenter__(self):
        self.opened += 1
        self._session = object()
        return self

    async def __aexit__(self, exc_type, exc_val, traceback):
        assert self._session is not None, "closed twice"
        self._session = None


def test_is_open_follows_a_subclass_that_skips_super():
    async def run():
        reader = OwnSession()
        assert not reader.is_open
        async with reader:
            assert reader.is_open
        assert not reader.is_open
        return reader.opened

    assert asyncio.run(run()) == 1


class Dictionary(SourceAdapter):
    """A reader whose data dictionary adds a primary key and a foreign key."""

    def __init__(self) -> None:
        super().__init__(connection=duckdb.connect())
        self.augmented = 0

    async def _describe(self, sql, name, namespace):
        return _schema()

    async def _augment(self, schema, sql):
        self.augmented += 1
        fk = ForeignKey(("NAME",), "TEST", "NAMES", ("N",))
        apply_dictionary(schema, DataDictionary(primary_key=("ID",), foreign_keys=(fk,)))

    async def _copy(self, table, sql, arrow_schema):
        self.insert_page(table, _page(0))


def test_augment_schema_after_load_adds_nothing_twice():
    async def run():
        async with Dictionary() as reader:
            await reader.load("PAGES", "select 1", "TEST")
            await reader.augment_schema()  # the documentation's sequence: load, then augment
            return reader

    reader = asyncio.run(run())
    assert reader.augmented == 1
    assert [fk.ref_table for fk in reader.table_schema.foreign_keys] == ["NAMES"]
    assert reader.table_schema.pks == ("ID",)


@pytest.mark.parametrize("awaited", [False, True], ids=["plain", "awaited"])
def test_a_page_for_a_table_never_prepared_is_an_error_naming_it(awaited):
    from producer_lib.errors import SourceError

    async def run():
        adapter = SourceAdapter(connection=duckdb.connect())
        result = adapter.insert_page("MISSING", _page(0))
        if awaited:
            await result

    with pytest.raises(SourceError) as info:
        asyncio.run(run())
    assert info.value.table == "MISSING"


class CoroutineOverrides(SourceAdapter):
    """A reader written against main: it overrides both methods as coroutines."""

    def __init__(self) -> None:
        super().__init__(connection=duckdb.connect())
        self.calls: list[str] = []

    async def prepare_load(self, duckdb_table, table_schema):
        self.calls.append("prepare_load")
        return await super().prepare_load(duckdb_table, table_schema)

    async def insert_page(self, duckdb_table, arrow_table):
        self.calls.append("insert_page")
        return await super().insert_page(duckdb_table, arrow_table)

    async def _describe(self, sql, name, namespace):
        return _schema()

    async def _copy(self, table, sql, arrow_schema):
        await self.insert_page(table, _page(0))


def test_coroutine_overrides_written_against_main_still_load():
    async def run():
        async with CoroutineOverrides() as reader:
            await reader.load("PAGES", "select 1", "TEST")
            return reader

    with pytest.warns(FlowPlatformDeprecationWarning, match="awaiting SourceAdapter"):
        reader = asyncio.run(run())  # the overrides await super()'s plain methods
    assert reader.calls == ["prepare_load", "insert_page"]
    assert _count(reader.connection) == (ROWS_PER_PAGE, ROWS_PER_PAGE)
