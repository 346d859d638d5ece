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


# -- cursor and next-link pagination ------------------------------------------------------

EVENT_PAGES, EVENT_ROWS = 7, 30


class Events(Items):
    """Follows next links from the first page; how the API names the next page varies."""

    async def first_page_url(self, resource):
        return f"{resource}?limit={EVENT_ROWS}"


class LinkedApi:
    """Events in EVENT_PAGES pages; ``style`` says how a page names the next one.

    ``link``: an RFC 8288 ``Link`` header (next among other rels); ``next_url``: the
    field ``links.next`` holds a relative URL; ``cursor``: ``meta.next_cursor`` holds an opaque
    cursor for the ``cursor`` query parameter. The last page names none.
    """

    def __init__(self, style, loop_back=False, fail_once=()):
        self.style, self.loop_back = style, loop_back
        self.fail_once = set(fail_once)
        self.served = []

    def _cursor_page(self, request):
        cursor = request.query.get("cursor") or request.query.get("after") or "c0"
        return int(cursor[1:])

    async def events(self, request):
        assert request.query["limit"] == str(EVENT_ROWS)
        n = self._cursor_page(request)
        if n in self.fail_once:
            self.fail_once.discard(n)
            return web.Response(status=503)
        self.served.append(n)
        rows = range(n * EVENT_ROWS, (n + 1) * EVENT_ROWS)
        body = {"items": [{"id": i, "name": f"e{i}"} for i in rows]}
        following = 1 if self.loop_back and n == 2 else n + 1
        headers = {}
        if following < EVENT_PAGES:
            if self.style == "link":
                headers["Link"] = (
                    f'</events?limit={EVENT_ROWS}&after=c0>; rel="first", '
                    f'</events?limit={EVENT_ROWS}&after=c{following}>; rel="next"'
                )
            elif self.style == "next_url":
                body["links"] = {"next": f"events?limit={EVENT_ROWS}&after=c{following}"}
            else:
                body["meta"] = {"next_cursor": f"c{following}"}
        elif self.style == "cursor":
            body["meta"] = {"next_cursor": None}
        return web.json_response(body, headers=headers)


def _run_events(api, reader_class=Events, **options):
    conn = duckdb.connect()
    app = web.Application()
    app.router.add_get("/events", api.events)

    async def run():
        async with TestServer(app, host="127.0.0.1") as server:
            base = str(server.make_url("/"))
            async with reader_class(
                base, connection=conn, backoff_seconds=0.01, **options
            ) as reader:
                await reader.load("EVENTS", "events", "SHOP", "SHOP")
                return reader

    return asyncio.run(run()), conn


class LinkEvents(Events):
    pass


class NextUrlEvents(Events):
    next_field = "links.next"


class CursorEvents(Events):
    next_field, cursor_param = "meta.next_cursor", "cursor"


@pytest.mark.parametrize(
    ("style", "reader_class"),
    [("link", LinkEvents), ("next_url", NextUrlEvents), ("cursor", CursorEvents)],
    ids=["link-header", "next-url-field", "cursor-field"],
)
def test_next_links_are_followed_to_the_last_page(style, reader_class):
    api = LinkedApi(style)
    _, conn = _run_events(api, reader_class)
    assert api.served == list(range(EVENT_PAGES))  # in order, each once, none past the end
    assert conn.execute(
        'select count(*), count(distinct id), max(id) from "EVENTS"'
    ).fetchone() == (
        EVENT_PAGES * EVENT_ROWS,
        EVENT_PAGES * EVENT_ROWS,
        EVENT_PAGES * EVENT_ROWS - 1,
    )


def test_a_failing_cursor_page_is_retried_and_the_walk_goes_on():
    api = LinkedApi("cursor", fail_once={3})
    reader, conn = _run_events(api, CursorEvents)
    assert reader.retries == 1
    assert api.served == list(range(EVENT_PAGES))
    assert conn.execute('select count(*) from "EVENTS"').fetchone() == (EVENT_PAGES * EVENT_ROWS,)


def test_a_next_link_back_to_a_read_page_fails_naming_it():
    api = LinkedApi("next_url", loop_back=True)
    with pytest.raises(SourceError, match="already read") as info:
        _run_events(api, NextUrlEvents)
    assert info.value.next_url.endswith("/events?limit=30&after=c1")
    assert "after=c2" in info.value.url
    assert api.served == [0, 1, 2]


def test_without_a_next_field_or_link_only_the_first_page_loads():
    api = LinkedApi("cursor")
    _, conn = _run_events(api, LinkEvents)  # reads Link headers; this API sends none
    assert api.served == [0]
    assert conn.execute('select count(*) from "EVENTS"').fetchone() == (EVENT_ROWS,)


# -- jitter in the retry backoff ----------------------------------------------------------


def test_two_retry_schedules_differ_and_stay_within_their_bounds():
    def schedule():
        reader = Items(
            "http://unused/",
            connection=duckdb.connect(),
            backoff_seconds=0.5,
            max_backoff_seconds=8.0,
        )
        return [reader.backoff(attempt) for attempt in range(1, 9)]

    first, second = schedule(), schedule()
    assert first != second
    for attempt, (a, b) in enumerate(zip(first, second, strict=True), start=1):
        ceiling = min(0.5 * 2 ** (attempt - 1), 8.0)
        assert 0.0 <= a <= ceiling
        assert 0.0 <= b <= ceiling
    assert max(first[5:] + second[5:]) <= 8.0  # capped from the 5th retry on


class LockstepApi:
    """Every page fails twice with 503 (no Retry-After), then answers; arrival times kept."""

    def __init__(self):
        self.arrivals = collections.defaultdict(list)

    async def count(self, request):
        return web.json_response({"pages": 6})

    async def page(self, request):
        n = int(request.query["page"])
        self.arrivals[n].append(asyncio.get_running_loop().time())
        if len(self.arrivals[n]) <= 2:
            return web.Response(status=503)
        return web.json_response({"items": [{"id": n, "name": f"p{n}"}]})


def test_pages_failing_together_do_not_retry_in_lockstep():
    api = LockstepApi()
    conn = duckdb.connect()
    app = web.Application()
    app.router.add_get("/items/count", api.count)
    app.router.add_get("/items", api.page)

    async def run():
        async with TestServer(app, host="127.0.0.1") as server:
            async with Items(
                str(server.make_url("/")),
                connection=conn,
                concurrency=6,
                backoff_seconds=0.2,
                jitter_seed=3,
            ) as reader:
                await reader.load("ITEMS", "items", "SHOP", "SHOP")

    asyncio.run(run())
    assert conn.execute('select count(*) from "ITEMS"').fetchone() == (6,)
    first_waits = [times[1] - times[0] for times in api.arrivals.values()]
    second_waits = [times[2] - times[1] for times in api.arrivals.values()]
    assert max(first_waits) <= 0.2 + 0.15  # the bound, plus scheduling slack on a busy host
    assert max(second_waits) <= 0.4 + 0.15
    assert max(first_waits) - min(first_waits) > 0.05  # spread out, not all after 0.2 s
    assert max(second_waits) - min(second_waits) > 0.05
