"""RestReader: load a paged REST API into a DuckDB staging table, pages fetched concurrently.

A subclass says what the resource looks like and how it pages::

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

``load``'s second argument is the resource (what ``page_urls`` pages through), not SQL.
At most ``concurrency`` requests run at once. 429 and 5xx responses and connection errors are
retried with exponential backoff (``Retry-After`` honoured); after ``max_retries`` retries the
load fails with a SourceError naming the URL and the last status.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
from datetime import UTC, datetime
from typing import Any

import aiohttp
import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.sources.adapter import SourceAdapter

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})  # throttled or a server hiccup


class RestReader(SourceAdapter):
    """Base of REST readers: concurrent, bounded, retried page fetches into DuckDB.

    Args:
        base_url: Prefix of relative page URLs (``https://api.example.com/v1/``).
        logger: Where progress and retries are logged.
        connection: The DuckDB staging database; default: DuckDB's default connection.
        concurrency: Most requests in flight at once.
        max_retries: Retries of one request before the load fails.
        backoff_seconds: First retry delay; doubled on every further retry.
        max_backoff_seconds: Longest delay between two attempts (also caps Retry-After).
        headers: Sent with every request (e.g. ``Authorization``).
        timeout_seconds: Total time allowed for one request.
    """

    sql_dialect = None  # resources, not SQL: no lineage

    def __init__(
        self, base_url: str = "", logger: logging.Logger | None = None, *,
        connection: duckdb.DuckDBPyConnection | None = None, concurrency: int = 4,
        max_retries: int = 5, backoff_seconds: float = 0.5, max_backoff_seconds: float = 60.0,
        headers: dict[str, str] | None = None, timeout_seconds: float = 60.0,
    ) -> None:  # fmt: skip
        super().__init__(logger, connection=connection)
        self.base_url = base_url
        self.concurrency, self.max_retries = concurrency, max_retries
        self.backoff_seconds, self.max_backoff_seconds = backoff_seconds, max_backoff_seconds
        self.headers = dict(headers or {})
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.retries = 0
        """Retried requests so far (all loads of this reader)."""
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

    async def page_urls(self, resource: str) -> list[str]:
        """Return the URLs of every page of ``resource`` (absolute or relative to base_url)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement page_urls")

    def page_to_arrow(self, payload: Any, arrow_schema: pa.Schema) -> pa.Table:
        """Turn one page's decoded JSON into an Arrow table with (a subset of) the columns."""
        raise NotImplementedError(f"{type(self).__name__} does not implement page_to_arrow")

    # -- fetching -------------------------------------------------------------------------

    async def fetch_json(self, url: str) -> Any:
        """GET ``url`` as JSON, within the concurrency bound, retrying 429/5xx.

        Raises:
            SourceError: Another status, or still failing after ``max_retries`` retries;
                ``url=``, ``status=`` and ``attempts=`` say which.
        """
        full = url if "://" in url else self.base_url + url
        async with self._semaphore:
            for attempt in range(1, self.max_retries + 2):
                status, payload, delay = await self._attempt(full, attempt)
                if status is None:
                    return payload
                if attempt > self.max_retries:
                    break
                self.retries += 1
                self.logger.info("retrying url=%s status=%s attempt=%d delay_s=%.2f",
                                 full, status, attempt, delay)  # fmt: skip
                await asyncio.sleep(delay)
        raise SourceError(f"GET failed after {self.max_retries} retries", url=full,
                          status=status, attempts=attempt)  # fmt: skip

    async def _attempt(self, url: str, attempt: int) -> tuple[int | str | None, Any, float]:
        """One GET: ``(None, payload, 0)`` on success, else ``(status, None, delay)``."""
        if self._session is None:
            raise SourceError("RestReader is not open: use 'async with'", url=url)
        backoff = min(self.backoff_seconds * 2 ** (attempt - 1), self.max_backoff_seconds)
        try:
            async with self._session.get(url) as response:
                if response.status in RETRY_STATUSES:
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                    wait = backoff if retry_after is None else retry_after
                    return response.status, None, min(wait, self.max_backoff_seconds)
                if response.status >= 400:
                    raise SourceError(f"GET failed: {response.reason}", url=url,
                                      status=response.status)  # fmt: skip
                return None, await response.json(content_type=None), 0.0
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            return type(exc).__name__, None, backoff

    # -- the load -------------------------------------------------------------------------

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        return self.resource_schema(sql, name, namespace)

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        page_schema = self.table_schema.get_pyarrow(technical=False)
        urls = await self.page_urls(sql)
        tasks = [asyncio.create_task(self._load_page(duckdb_table, url, page_schema))
                 for url in urls]  # fmt: skip
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _load_page(self, duckdb_table: str, url: str, page_schema: pa.Schema) -> None:
        payload = await self.fetch_json(url)
        try:
            page = self.page_to_arrow(payload, page_schema)
        except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"Cannot convert the page: {exc}", url=url,
                              table=duckdb_table) from exc  # fmt: skip
        await self.insert_page(duckdb_table, page)  # awaited: an override may be a coroutine


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
