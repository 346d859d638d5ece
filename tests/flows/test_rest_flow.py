"""The rest flow on a local shop API and the real broker: concurrent pages, retries, deltas."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest

from flows.rest_flow import RestOrdersFlow
from producer_lib.cli import main
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from tests.support.consume import consume_all
from tests.support.decode import decoded_values
from tests.support.rest_server import ShopApi

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PAGE_SIZE, CONCURRENCY = 20, 4  # 250 orders: 13 pages


@pytest.fixture
def shop(monkeypatch, kafka_bootstrap, kafka_admin):
    """A fresh shop API, an own topic and an own dataflow (own pointer) per test."""
    topic = f"t_restflow_{uuid.uuid4().hex[:8]}.orders"
    with ShopApi(orders=250) as api:
        for name, value in {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "KAFKA_TOPIC_PARTITIONS": "2",
            "REST_FLOW_BASE_URL": api.url,
            "REST_FLOW_TOPIC": topic,
            "REST_FLOW_PAGE_SIZE": str(PAGE_SIZE),
            "REST_FLOW_CONCURRENCY": str(CONCURRENCY),
        }.items():
            monkeypatch.setenv(name, value)
        yield SimpleNamespace(
            api=api, topic=topic, bootstrap=kafka_bootstrap, dataflow=f"test_{uuid.uuid4().hex[:8]}"
        )
    if topic in kafka_admin.list_topics(timeout=10).topics:
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def run(shop: SimpleNamespace, load: str):
    return asyncio.run(RestOrdersFlow().run(load, dataflow=shop.dataflow))


def published(shop: SimpleNamespace, row_type: str | None = None) -> list[dict]:
    values = decoded_values(shop.bootstrap, shop.topic)
    return [v for v in values if row_type is None or v["__change_type"] == row_type]


def test_initial_load_reads_pages_concurrently_and_retries_throttling(shop):
    shop.api.fail(page=3, status=503)
    shop.api.fail(page=5, status=429)
    result = run(shop, "initial")
    assert result.rows == {"shop_api.orders": 251}  # + the TRUNCATE
    values = published(shop)
    assert Counter(v["__change_type"] for v in values) == {"T": 1, "R": 250}
    replaced = {v["id"]: v for v in values if v["__change_type"] == "R"}
    assert set(replaced) == set(range(1, 251))
    assert replaced[10]["amount"] == Decimal("12.50") and replaced[10]["status"] == "placed"

    assert shop.api.failures == 2  # both retried: every page served once, none lost
    assert shop.api.requests == Counter({0: 1, **{page: 1 for page in range(1, 14)}})
    assert 1 < shop.api.max_in_flight <= CONCURRENCY
    assert result.delta_pointer == {
        "updated_at": shop.api.newest().isoformat(),
        "ids": list(range(241, 251)),
    }


def test_delta_publishes_exactly_the_changed_orders_then_nothing(shop):
    run(shop, "initial")
    later = shop.api.newest() + timedelta(seconds=5)
    shop.api.put(5, later, status="cancelled")
    shop.api.put(251, later + timedelta(seconds=1), customer_id=9, amount="99.90")
    delta = run(shop, "delta")
    assert delta.rows == {"shop_api.orders": 2}
    assert delta.delta_pointer == {
        "updated_at": (later + timedelta(seconds=1)).isoformat(),
        "ids": [251],
    }
    upserts = {v["id"]: v for v in published(shop, "A")}
    assert set(upserts) == {5, 251}
    assert upserts[5]["status"] == "cancelled" and upserts[5]["updated_at"] == later
    assert upserts[251]["amount"] == Decimal("99.90")

    key = f"rest_orders|{shop.dataflow}|0".encode()
    logged = [
        json.loads(m.value())
        for m in consume_all(shop.bootstrap, EXECUTION_LOG_TOPIC)
        if m.key() == key
    ][-1]
    assert (logged["status"], logged["delta_pointer"]) == ("COMPLETED", delta.delta_pointer)
    assert (logged["commit_id"], logged["rows"]) == (delta.commit_id, delta.rows)

    again = run(shop, "delta")
    assert (again.rows, again.delta_pointer, again.commit_id) == ({}, delta.delta_pointer, None)
    assert len(published(shop)) == 251 + 2


def test_an_order_stamped_at_the_pointer_but_visible_late_is_not_lost(shop):
    initial = run(shop, "initial")
    shop.api.put(7, shop.api.newest(), status="paid")  # the pointer's instant, seen only now
    delta = run(shop, "delta")
    assert delta.rows == {"shop_api.orders": 1}
    assert [(v["id"], v["status"]) for v in published(shop, "A")] == [(7, "paid")]
    assert delta.delta_pointer == {
        "updated_at": initial.delta_pointer["updated_at"],
        "ids": [7, *range(241, 251)],
    }
    assert run(shop, "delta").rows == {}


def test_the_command_line_runs_the_flow(shop, monkeypatch):
    args = ["run", "flows.rest_flow:RestOrdersFlow", "--dataflow", shop.dataflow]
    assert main([*args, "--load", "initial"]) == 0
    assert Counter(v["__change_type"] for v in published(shop)) == {"T": 1, "R": 250}
    monkeypatch.delenv("REST_FLOW_BASE_URL")
    assert main([*args, "--load", "delta"]) == 2  # configuration error: nothing ran
