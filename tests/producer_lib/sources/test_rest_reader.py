import asyncio
import collections

import duckdb
import pyarrow as pa
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from producer_lib.errors import SourceError
from producer_lib.schema import AvroLong, AvroString, ValueSchema
from producer_lib.sources import RestReader

PAGES, PAGE_ROWS, LIMIT = 20, 50, 3


class Items(RestReader):
    def resource_schema(self, resource, name, namespace):
        schema = ValueSchema(name, namespace)
        schema.add_field("id", AvroLong(), nullable=False)
        schema.add_field("name", AvroString())
        schema.add_primary_key("id")
        return schema

    async def page_urls(self, resource):
        count = (await self.fetch_json(f"{resource}/count"))["pages"]
        return [f"{resource}?page={n}" for n in range(count)]

    def page_to_arrow(self, payload, arrow_schema):
        return pa.Table.from_pylist(payload["items"], schema=arrow_schema)


class FlakyApi:
    """Pages 0..PAGES-1; every 3rd page answers 429 first, every 4th a 500 first."""

    def __init__(self, always_fail=False):
        self.always_fail = always_fail
        self.calls = collections.Counter()
        self.served = collections.Counter()
        self.in_flight = self.max_in_flight = 0

    async def count(self, request):
        return web.json_response({"pages": PAGES})

    async def page(self, request):
        n = int(request.query["page"])
        self.calls[n] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if self.always_fail or (n % 4 == 0 and self.calls[n] == 1):
                return web.Response(status=500)
            if n % 3 == 0 and self.calls[n] == 1:
                return web.Response(status=429, headers={"Retry-After": "0"})
            self.served[n] += 1
            rows = range(n * PAGE_ROWS, (n + 1) * PAGE_ROWS)
            return web.json_response({"items": [{"id": i, "name": f"i{i}"} for i in rows]})
        finally:
            self.in_flight -= 1


def _run(api, **options):
    conn = duckdb.connect()
    app = web.Application()
    app.router.add_get("/items/count", api.count)
    app.router.add_get("/items", api.page)

    async def run():
        async with TestServer(app, host="127.0.0.1") as server:
            base = str(server.make_url("/"))
            async with Items(
                base, connection=conn, concurrency=LIMIT, backoff_seconds=0.01, **options
            ) as reader:
                await reader.load("ITEMS", "items", "SHOP", "SHOP")
                return reader

    return asyncio.run(run()), conn


def test_all_pages_load_once_within_the_concurrency_bound_despite_429_and_500():
    api = FlakyApi()
    reader, conn = _run(api)
    assert conn.execute('select count(*), count(distinct id) from "ITEMS"').fetchone() == (
        PAGES * PAGE_ROWS,
        PAGES * PAGE_ROWS,
    )
    assert set(api.served) == set(range(PAGES))
    assert set(api.served.values()) == {1}
    assert api.max_in_flight <= LIMIT
    assert api.max_in_flight > 1
    retried = {n for n in range(PAGES) if n % 3 == 0 or n % 4 == 0}
    assert reader.retries == len(retried)
    assert reader.table_schema.pks == ("id",)


def test_gives_up_after_max_retries_naming_url_and_status():
    api = FlakyApi(always_fail=True)
    with pytest.raises(SourceError) as info:
        _run(api, max_retries=2)
    error = info.value
    assert error.status == 500
    assert "/items?page=" in error.url
    assert "after 2 retries" in str(error)
    assert max(api.calls.values()) == 3
