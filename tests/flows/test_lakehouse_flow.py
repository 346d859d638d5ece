"""The lakehouse flow: Delta tables in (written by Spark), revenue per segment out to Kafka."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import pytest

from flows.lakehouse import LakehouseFlow
from tests.support.consume import consume_all
from tests.support.decode import decoded_values

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

CUSTOMERS = [(1, "AUTOMOBILE"), (2, "BUILDING"), (3, "BUILDING"), (4, "MACHINERY")]
ORDERS = [(10, 1, "100.00"), (11, 2, "50.50"), (12, 3, "25.25"), (13, 4, "7.00")]


def write(spark, path, rows, schema, mode="overwrite"):
    spark.createDataFrame(rows, schema).write.format("delta").mode(mode).save(str(path))


@pytest.fixture
def lake(spark, tmp_path, monkeypatch, kafka_bootstrap, new_topic):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("LAKEHOUSE_PATH", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_FLOW_TOPIC", new_topic())
    monkeypatch.setattr(LakehouseFlow, "function_name", f"lake_{uuid.uuid4().hex[:8]}")
    customers = [(k, s) for k, s in CUSTOMERS]
    write(spark, tmp_path / "tpch" / "customer", customers, "c_custkey BIGINT, c_mktsegment STRING")
    orders = [(k, c, Decimal(p)) for k, c, p in ORDERS]
    write(
        spark,
        tmp_path / "tpch" / "orders",
        orders,
        "o_orderkey BIGINT, o_custkey BIGINT, o_totalprice DECIMAL(15,2)",
    )
    return tmp_path


def published(bootstrap: str) -> list[tuple]:
    import os

    values = decoded_values(bootstrap, os.environ["LAKEHOUSE_FLOW_TOPIC"])
    return [(v["__change_type"], v["segment"], v["order_count"], v["revenue"]) for v in values]


def test_initial_then_delta_publishes_only_changed_segments(lake, spark, kafka_bootstrap):
    first = asyncio.run(LakehouseFlow().run("initial"))
    assert first.rows == {"lakehouse.revenue_by_segment": 4}  # TRUNCATE + 3 segments
    rows = published(kafka_bootstrap)
    assert sorted(rows[1:]) == [
        ("R", "AUTOMOBILE", 1, Decimal("100.00")),
        ("R", "BUILDING", 2, Decimal("75.75")),
        ("R", "MACHINERY", 1, Decimal("7.00")),
    ]

    # a new BUILDING order, and the only MACHINERY order goes away
    orders = [(k, c, Decimal(p)) for k, c, p in [*ORDERS[:3], (14, 3, "1.25")]]
    write(
        spark,
        lake / "tpch" / "orders",
        orders,
        "o_orderkey BIGINT, o_custkey BIGINT, o_totalprice DECIMAL(15,2)",
    )
    delta = asyncio.run(LakehouseFlow().run("delta"))
    assert delta.delta_pointer["versions"] == {"orders": 1, "customer": 0}
    assert published(kafka_bootstrap)[len(rows) :] == [
        ("A", "BUILDING", 3, Decimal("77.00")),
        ("X", "MACHINERY", None, None),
    ]

    again = asyncio.run(LakehouseFlow().run("delta"))  # no new Delta version: nothing to do
    assert again.rows == {} and again.delta_pointer == delta.delta_pointer


def test_lineage_of_the_lakehouse_sql(lake, kafka_bootstrap):
    import json

    commit = asyncio.run(LakehouseFlow().run("initial")).commit_id
    docs = [json.loads(m.value()) for m in consume_all(kafka_bootstrap, "_lineage")]
    doc = next(d for d in docs if d["commit_id"] == commit)
    assert doc["target"] == "lakehouse.revenue_by_segment"
    assert len(doc["sources"]) == 2 and all("delta_scan(" in s for s in doc["sources"])
    kinds = {c["target"]: c["kind"] for c in doc["columns"]}
    assert kinds == {"segment": "copy", "order_count": "expression", "revenue": "expression"}
