"""RestReader: load a paged REST API into a DuckDB staging table, pages fetched concurrently.

A subclass says what the resource looks like and how it pages. With page numbers (every page
known up front, fetched concurrently)::

    class Orders(RestReader):
        def resource_schema(self, resource, name, namespace):
            schema = ValueSchema(name, namespace)
            schema.add_field("id", AvroLong(), nullable=False)
            schema.add_primary_key("id")
            return schema

        async def page_urls(self, resource):
            total = (await self.fetch_json(f"{resource}?count=true"))["count"]
            return [f"{resource}?page={n}" for n in range(ceil(total / 100))]

        def page_to_arrow(self, payload, arrow_schema):
            return pa.Table.from_pylist(payload["items"], schema=arrow_schema)

    async with Orders("https://api.example.com/v1/", logger, concurrency=8) as reader:
        await reader.load("ORDERS", "orders", "SHOP", "SHOP")

With cursors or next links (each page names the next one), a subclass returns the first
page from :meth:`RestReader.first_page_url` instead of ``page_urls``; the reader then follows
the RFC 8288 ``Link: <...>; rel="next"`` header, else the response field ``next_field`` (a
dotted path) holding the next URL, or the next cursor when ``cursor_param`` names the query
parameter that carries it. The load ends at the first page without a next link::

    class Events(RestReader):
        next_field, cursor_param = "meta.next_cursor", "cursor"

        async def first_page_url(self, resource):
            return f"{resource}?limit=500"

``load``'s second argument is the resource (what the pages page through), not SQL.
At most ``concurrency`` requests run at once. 429 and 5xx responses and connection errors are
retried with exponentially growing, fully jittered delays (a random wait between 0 and
``backoff_seconds * 2 ** (retry - 1)``, capped at ``max_backoff_seconds``), so pages that
failed together do not retry together; a ``Retry-After`` header is honoured, plus up to
``backoff_seconds`` of jitter. After ``max_retries`` retries the load fails with a SourceError
naming the URL and the last status.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import aiohttp
import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.sources.adapter import SourceAdapter, settle

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})  # throttled or a server hiccup
_LINK = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]+)*)")
_REL = re.compile(r"""\brel\s*=\s*(?:"([^"]*)"|([^\s;,"]+))""", re.IGNORECASE)


class RestReader(SourceAdapter):
    """Base of REST readers: concurrent, bounded, retried page fetches into DuckDB.

    Args:
        base_url: Prefix of relative page URLs (``https://api.example.com/v1/``).
        logger: Where progress and retries are logged.
        connection: The DuckDB staging database; default: DuckDB's default connection.
        concurrency: Most requests in flight at once.
        max_retries: Retries of one request before the load fails.
        backoff_seconds: Upper bound of the first retry's random delay; doubled on every
            further retry.
        max_backoff_seconds: Longest delay between two attempts (also caps Retry-After).
        headers: Sent with every request (e.g. ``Authorization``).
        timeout_seconds: Total time allowed for one request.
        jitter_seed: Seed of the retry delays' random source; default: unpredictable.

    Attributes:
        next_field: Dotted path of the response field holding the next page's URL or cursor
            (following next links only); None: only the ``Link`` header is followed.
        cursor_param: Query parameter that carries the cursor of ``next_field`` (the next
            page is the current page's URL with this parameter set); None: ``next_field``
            holds a URL.
    """

    sql_dialect = None  # resources, not SQL: no lineage
    next_field: str | None = None
    cursor_param: str | None = None

    def __init__(
        self,
        base_url: str = "",
        logger: logging.Logger | None = None,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        concurrency: int = 4,
        max_retries: int = 5,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 60.0,
        headers: dict[str, str] | None = None,
        timeout_seconds: float = 60.0,
        jitter_seed: int | None = None,
    ) -> None:
        super().__init__(logger, connection=connection)
        self.base_url = base_url
        self.concurrency, self.max_retries = concurrency, max_retries
        self.backoff_seconds, self.max_backoff_seconds = backoff_seconds, max_backoff_seconds
        self.headers = dict(headers or {})
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.retries = 0
        """Retried requests so far (all loads of this reader)."""
        self._random = random.Random(jitter_seed)  # noqa: S311 - jitter, not cryptography
        self._session: aiohttp.ClientSession | None = None
        self._semaphore = asyncio.Semaphore(concurrency)

    async def open(self) -> None:
        """Open the HTTP session."""
        self._session = aiohttp.ClientSession(headers=self.headers, timeout=self.timeout)

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().close()

    # -- what a subclass implements -------------------------------------------------------

    def resource_schema(self, resource: str, name: str, namespace: str) -> ValueSchema:
        """Return the value schema of ``resource`` (columns, types, keys, comments)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement resource_schema")

    async def first_page_url(self, resource: str) -> str | None:
        """Return the first page's URL to follow next links from; None: use :meth:`page_urls`.

        Default None: pages are numbered and fetched concurrently.
        """
        return None

    async def page_urls(self, resource: str) -> list[str]:
        """Return the URLs of every page of ``resource`` (absolute or relative to base_url)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement page_urls")

    def page_to_arrow(self, payload: Any, arrow_schema: pa.Schema) -> pa.Table:
        """Turn one page's decoded JSON into an Arrow table with (a subset of) the columns."""
        raise NotImplementedError(f"{type(self).__name__} does not implement page_to_arrow")

    def next_page_url(self, url: str, payload: Any, headers: Mapping[str, str]) -> str | None:
        """Return the URL of the page after ``url``, or None after the last page.

        The ``Link`` header's ``rel="next"`` target wins; else ``next_field`` of the payload:
        a cursor put into the ``cursor_param`` query parameter of ``url``, or a URL. Either
        is resolved against ``url``. An absent, null or empty value ends the load.
        """
        getall = getattr(headers, "getall", None)  # a header may come several times
        links = ", ".join(getall("Link", [])) if getall else headers.get("Link")
        linked = next_link(links)
        if linked:
            return urljoin(url, linked)
        value = _field(payload, self.next_field) if self.next_field else None
        if value is None or value == "":
            return None
        if self.cursor_param:
            return with_query(url, **{self.cursor_param: str(value)})
        return urljoin(url, str(value))

    # -- fetching -------------------------------------------------------------------------

    async def fetch_json(self, url: str) -> Any:
        """GET ``url`` as JSON, within the concurrency bound, retrying 429/5xx.

        Raises:
            SourceError: Another status, or still failing after ``max_retries`` retries;
                ``url=``, ``status=`` and ``attempts=`` say which.
        """
        payload, _ = await self.fetch_page(url)
        return payload

    async def fetch_page(self, url: str) -> tuple[Any, Mapping[str, str]]:
        """GET ``url`` as :meth:`fetch_json` does; return its JSON and its response headers."""
        full = self.absolute(url)
        async with self._semaphore:
            for attempt in range(1, self.max_retries + 2):
                status, page, delay = await self._attempt(full, attempt)
                if status is None:
                    return page
                if attempt > self.max_retries:
                    break
                self.retries += 1
                self.logger.info(
                    "retrying url=%s status=%s attempt=%d delay_s=%.2f",
                    full,
                    status,
                    attempt,
                    delay,
                )
                await asyncio.sleep(delay)
        raise SourceError(
            f"GET failed after {self.max_retries} retries",
            url=full,
            status=status,
            attempts=attempt,
        )

    def absolute(self, url: str) -> str:
        """``url`` itself when absolute, else ``base_url + url``."""
        return url if "://" in url else self.base_url + url

    def backoff(self, attempt: int) -> float:
        """The delay before retry ``attempt`` (from 1): full jitter, capped.

        A uniform random wait in ``[0, min(max_backoff_seconds, backoff_seconds * 2 **
        (attempt - 1))]``: requests that failed at the same moment spread out instead of
        retrying in lockstep.
        """
        ceiling = min(self.backoff_seconds * 2 ** (attempt - 1), self.max_backoff_seconds)
        return self._random.uniform(0.0, ceiling)

    async def _attempt(self, url: str, attempt: int) -> tuple[int | str | None, Any, float]:
        """One GET: ``(None, (payload, headers), 0)`` on success, else ``(status, None, delay)``."""
        if self._session is None:
            raise SourceError("RestReader is not open: use 'async with'", url=url)
        try:
            async with self._session.get(url) as response:
                if response.status in RETRY_STATUSES:
                    return response.status, None, self._retry_delay(response, attempt)
                if response.status >= 400:
                    raise SourceError(
                        f"GET failed: {response.reason}", url=url, status=response.status
                    )
                payload = await response.json(content_type=None)
                return None, (payload, response.headers.copy()), 0.0
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            return type(exc).__name__, None, self.backoff(attempt)

    def _retry_delay(self, response: aiohttp.ClientResponse, attempt: int) -> float:
        """Retry-After plus a little jitter when the server sent it, else :meth:`backoff`."""
        retry_after = _retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return self.backoff(attempt)
        jitter = self._random.uniform(0.0, self.backoff_seconds)
        return min(retry_after + jitter, self.max_backoff_seconds)

    # -- the load -------------------------------------------------------------------------

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        return self.resource_schema(sql, name, namespace)

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        page_schema = self.table_schema.get_pyarrow(technical=False)
        first = await self.first_page_url(sql)
        if first is not None:
            await self._follow_links(duckdb_table, self.absolute(first), page_schema)
            return
        urls = await self.page_urls(sql)
        tasks = [
            asyncio.create_task(self._load_page(duckdb_table, url, page_schema)) for url in urls
        ]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            await _cancel(tasks)
            raise

    async def _follow_links(self, duckdb_table: str, url: str, page_schema: pa.Schema) -> None:
        """Load ``url`` and every page its next links lead to, one after the other.

        The next page is requested while the current one is converted and appended.

        Raises:
            SourceError: A next link leads back to a page already read (a loop).
        """
        seen = {url}
        fetching: asyncio.Task[tuple[Any, Mapping[str, str]]] | None
        fetching = asyncio.create_task(self.fetch_page(url))
        try:
            while fetching is not None:
                payload, headers = await fetching
                following = self.next_page_url(url, payload, headers)
                if following is not None and following in seen:
                    raise SourceError(
                        "The next link leads to a page already read",
                        url=url,
                        next_url=following,
                        table=duckdb_table,
                    )
                fetching = None
                if following is not None:
                    seen.add(following)
                    fetching = asyncio.create_task(self.fetch_page(following))
                page = self._convert(duckdb_table, url, payload, page_schema)
                await settle(self.insert_page(duckdb_table, page))
                url = following or url
        finally:
            if fetching is not None:
                await _cancel([fetching])

    async def _load_page(self, duckdb_table: str, url: str, page_schema: pa.Schema) -> None:
        payload = await self.fetch_json(url)
        page = self._convert(duckdb_table, url, payload, page_schema)
        await settle(self.insert_page(duckdb_table, page))  # an override may be a coroutine

    def _convert(self, duckdb_table: str, url: str, payload: Any, schema: pa.Schema) -> pa.Table:
        try:
            return self.page_to_arrow(payload, schema)
        except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
            raise SourceError(
                f"Cannot convert the page: {exc}", url=url, table=duckdb_table
            ) from exc


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they are done."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def next_link(value: str | None) -> str | None:
    """The target of the ``rel="next"`` link of an RFC 8288 ``Link`` header, or None."""
    for match in _LINK.finditer(value or ""):
        for rel in _REL.finditer(match.group(2)):
            if "next" in (rel.group(1) or rel.group(2) or "").lower().split():
                return match.group(1).strip()
    return None


def with_query(url: str, **params: str) -> str:
    """``url`` with the query parameters ``params`` set (replacing values already there)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def _field(payload: Any, path: str) -> Any:
    """The value at the dotted ``path`` of a JSON object, or None when a step is missing."""
    value = payload
    for step in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(step)
    return value


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)
