"""The ``rest`` flow: orders from a paged JSON API, pages fetched concurrently, to Kafka.

The API is shaped like many SaaS APIs (page numbers and an ``updated_since`` filter like
Freshdesk's ``GET /api/v2/tickets?updated_since=…&page=…&per_page=…``; an envelope with the
total like Mailchimp's ``{"members": [...], "total_items": N}``)::

    GET {base}/orders?page=1&page_size=100[&updated_since=2024-05-01T12:00:00+00:00]
    {"items": [{"id": 7, "customer_id": 3, "status": "paid", "amount": "12.50",
                "updated_at": "2024-05-01T12:00:03.120000+00:00"}, ...],
     "total": 1234}

Items are sorted by id; ``updated_since`` is inclusive (``updated_at >= updated_since``). A
first request of one item tells the total; then every page is fetched at once, at most
``REST_FLOW_CONCURRENCY`` in flight, 429/5xx retried with backoff (``RestReader``).

- **initial load**: a TRUNCATE, then every order as REPLACE; one commit.
- **delta load**: the orders changed since the pointer as UPSERT, in the commit that moves it.

The pointer is the newest ``updated_at`` read and the ids stamped at exactly that instant.
A delta asks for ``updated_since`` = that instant (inclusive: an order stamped then but
visible only later is not lost) and skips the ids it already published, so a delta without
changes publishes nothing. A paged read is not a snapshot: an order created while the pages
are read may come after the last page and, if another order changed later still, be missed
until it changes again; an occasional initial load reconciles.

Run: ``REST_FLOW_BASE_URL=https://shop.example.com/api/ producer-lib run
flows.rest_flow:RestOrdersFlow --load initial`` (``REST_FLOW_TOPIC``, default
``shop_api.orders``; ``REST_FLOW_PAGE_SIZE``, default 100; ``REST_FLOW_CONCURRENCY``, 8).
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa

from producer_lib import (
    AvroDecimal,
    AvroLong,
    AvroTimestampMicros,
    AvroVarchar,
    FunctionRunner,
    KafkaProducer,
    KeySchema,
    RestReader,
    RowType,
    Target,
    ValueSchema,
    create_key_row,
    create_truncate_row,
)
from producer_lib.errors import ConfigError

NAMESPACE = "shop_api"
STAGE = "rest_orders"
BATCH_ROWS = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class OrdersApi(RestReader):
    """``GET orders`` pages of the shop API (see the module docstring)."""

    def __init__(self, base_url: str, page_size: int, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.page_size = page_size

    def resource_schema(self, resource: str, name: str, namespace: str) -> ValueSchema:
        """Columns, key and comments of an order (fields the API adds later are ignored)."""
        schema = ValueSchema(name, namespace, doc="Orders of the web shop, from its REST API")
        schema.add_field("id", AvroLong(), "Order id", nullable=False)
        schema.add_field("customer_id", AvroLong(), "Customer who placed the order")
        schema.add_field("status", AvroVarchar(20), "placed, paid, shipped or cancelled")
        schema.add_field("amount", AvroDecimal(12, 2), "Order total in EUR")
        schema.add_field("updated_at", AvroTimestampMicros(), "Last change", nullable=False)
        schema.add_primary_key("id")
        return schema

    async def page_urls(self, resource: str) -> list[str]:
        """Every page of ``resource``, after asking for one item to learn the total."""
        total = (await self.fetch_json(_with_query(resource, page=1, page_size=1)))["total"]
        pages = range(1, math.ceil(total / self.page_size) + 1)
        return [_with_query(resource, page=n, page_size=self.page_size) for n in pages]

    def page_to_arrow(self, payload: Any, arrow_schema: pa.Schema) -> pa.Table:
        """The page's items; amounts arrive as strings and stamps as ISO 8601."""
        items = [
            {
                **item,
                "amount": Decimal(item["amount"]),
                "updated_at": datetime.fromisoformat(item["updated_at"]),
            }
            for item in payload["items"]
        ]
        return pa.Table.from_pylist(items, schema=arrow_schema)


class RestOrdersFlow(FunctionRunner):
    """Orders from the shop's REST API; see the module docstring."""

    function_name = "rest_orders"
    source_system = "SHOP_API"

    def __init__(self) -> None:
        super().__init__()
        self.base_url = os.environ.get("REST_FLOW_BASE_URL", "")
        self.topic = os.environ.get("REST_FLOW_TOPIC", "shop_api.orders")
        self.page_size = int(os.environ.get("REST_FLOW_PAGE_SIZE", "100"))
        self.concurrency = int(os.environ.get("REST_FLOW_CONCURRENCY", "8"))

    def create_reader(self) -> OrdersApi:
        """A reader of the API at ``REST_FLOW_BASE_URL``."""
        if not self.base_url:
            raise ConfigError(
                "set REST_FLOW_BASE_URL to the shop API, e.g. https://shop.example.com/api/",
                flow=self.function_name,
            )
        return OrdersApi(
            self.base_url.rstrip("/") + "/",
            self.page_size,
            logger=self.logger,
            concurrency=self.concurrency,
        )

    async def initial_load(self, producer: KafkaProducer, reader: OrdersApi) -> None:
        """Every order as TRUNCATE + REPLACE rows, one commit."""
        target = await self._stage(producer, reader, "orders")
        truncate = create_truncate_row(target.value_schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate, target.key_schema),
            truncate,
            RowType.TRUNCATE,
            partition=0,
        )
        producer.produce_from_duckdb(STAGE, target, BATCH_ROWS, RowType.REPLACE)
        self._commit(producer, reader, None)

    async def delta_load(self, producer: KafkaProducer, reader: OrdersApi) -> None:
        """Orders changed since the pointer as UPSERT rows, one commit."""
        pointer = self.get_delta_pointer()
        if pointer is None:  # no initial load yet: read everything, as upserts
            target = await self._stage(producer, reader, "orders")
        else:
            since = urlencode({"updated_since": pointer["updated_at"]})
            target = await self._stage(producer, reader, f"orders?{since}")
            reader.connection.execute(  # published by the run that set the pointer
                f"DELETE FROM {STAGE} WHERE epoch_us(updated_at) = ? AND list_contains(?, id)",
                [_micros(pointer["updated_at"]), pointer["ids"]],
            )
        if reader.connection.execute(f"SELECT count(*) FROM {STAGE}").fetchone()[0]:
            producer.produce_from_duckdb(STAGE, target, BATCH_ROWS, RowType.UPSERT)
        self._commit(producer, reader, pointer)

    async def _stage(self, producer: KafkaProducer, reader: OrdersApi, resource: str) -> Target:
        """Read every page of ``resource`` into the staging table; the topic's target."""
        reader.set_schema_name_for_sql("orders", NAMESPACE)
        schema = await reader.load(STAGE, resource, NAMESPACE, self.source_system)
        schema.set_data_product_owner_email("shop-data@example.com")
        return producer.add_target(self.topic, "orders", KeySchema(schema), schema)

    def _commit(self, producer: KafkaProducer, reader: OrdersApi, pointer: Any) -> None:
        """Move the pointer to the newest stamp staged (and its ids); commit with the rows."""
        newest = reader.connection.execute(
            f"SELECT epoch_us(updated_at), list(id ORDER BY id) FROM {STAGE} "
            "GROUP BY ALL ORDER BY 1 DESC LIMIT 1"
        ).fetchone()
        if newest is not None:
            stamp = (_EPOCH + timedelta(microseconds=newest[0])).isoformat()
            same = pointer is not None and pointer["updated_at"] == stamp  # late, same instant
            ids = sorted({*newest[1], *(pointer["ids"] if same else [])})
            self.set_delta_pointer({"updated_at": stamp, "ids": ids})
        producer.commit()


def _with_query(resource: str, **params: Any) -> str:
    return f"{resource}{'&' if '?' in resource else '?'}{urlencode(params)}"


def _micros(iso: str) -> int:
    return (datetime.fromisoformat(iso) - _EPOCH) // timedelta(microseconds=1)
