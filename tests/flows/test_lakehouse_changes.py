"""The lakehouse flow's delta load follows the tables' change streams (Change Data Feed).

Real Delta tables made by Spark with the writer's table properties (change data feed and
deletion vectors on), changed over several commits by UPDATE, DELETE, INSERT and MERGE; a
real broker. What the flow published, folded by key, must equal the revenue SQL on the
tables, and each change must go out exactly once, also across a failed run and its retry.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from flows.lakehouse import LakehouseFlow
from producer_lib import RunFailed
from producer_lib.staging import load_packaged_extension
from tests.support.decode import decoded_values

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PROPS = "'delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'true'"
REVENUE = (
    "SELECT c.c_mktsegment, count(*), sum(o.o_totalprice) FROM delta_scan('{lake}/tpch/orders') o "
    "JOIN delta_scan('{lake}/tpch/customer') c ON o.o_custkey = c.c_custkey GROUP BY 1"
)


@pytest.fixture
def lake(spark, tmp_path, monkeypatch, kafka_bootstrap, new_topic) -> Path:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("LAKEHOUSE_PATH", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_FLOW_TOPIC", new_topic())
    monkeypatch.setattr(LakehouseFlow, "function_name", f"lake_{uuid.uuid4().hex[:8]}")
    sql(
        spark,
        tmp_path,
        "CREATE TABLE {c} (c_custkey BIGINT, c_mktsegment STRING) USING delta "
        f"TBLPROPERTIES ({PROPS})",
    )
    sql(
        spark,
        tmp_path,
        "CREATE TABLE {o} (o_orderkey BIGINT, o_custkey BIGINT, "
        f"o_totalprice DECIMAL(15,2)) USING delta TBLPROPERTIES ({PROPS})",
    )
    sql(
        spark,
        tmp_path,
        "INSERT INTO {c} VALUES (1, 'AUTOMOBILE'), (2, 'BUILDING'), "
        "(3, 'BUILDING'), (4, 'MACHINERY'), (5, 'HOUSEHOLD')",
    )
    sql(
        spark,
        tmp_path,
        "INSERT INTO {o} VALUES (10, 1, 100.00), (11, 2, 50.50), "
        "(12, 3, 25.25), (13, 4, 7.00), (14, 4, 3.00), (15, 5, 9.99)",
    )
    return tmp_path


def sql(spark, lake: Path, statement: str) -> None:
    """Run ``statement`` with ``{o}``/``{c}`` standing for the orders/customer tables."""
    spark.sql(statement.format(o=f"delta.`{lake}/tpch/orders`", c=f"delta.`{lake}/tpch/customer`"))


def published() -> list[tuple]:
    values = decoded_values(
        os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["LAKEHOUSE_FLOW_TOPIC"]
    )
    return [(v["__change_type"], v["segment"], v["order_count"], v["revenue"]) for v in values]


def folded(rows: list[tuple]) -> set[tuple]:
    """The topic's rows applied by key, as a lakehouse table holds them."""
    state: dict[str, tuple] = {}
    for kind, segment, count, revenue in rows:
        if kind == "T":
            state.clear()
        elif kind == "X":
            state.pop(segment, None)
        else:
            state[segment] = (segment, count, revenue)
    return set(state.values())


def expected(lake: Path) -> set[tuple]:
    con = duckdb.connect()
    load_packaged_extension(con, "delta")
    return set(con.execute(REVENUE.format(lake=lake)).fetchall())


class FailsBeforeCommit(LakehouseFlow):
    """The delta load produces its rows, then its commit fails (the runner aborts them)."""

    async def delta_load(self, producer, reader) -> None:
        def lost() -> None:
            raise ConnectionError("the broker went away before the commit")

        producer.commit = lost  # type: ignore[method-assign]
        try:
            await super().delta_load(producer, reader)
        finally:
            del producer.commit


def test_changes_go_out_exactly_once_across_a_failed_run(lake, spark):
    first = asyncio.run(LakehouseFlow().run("initial"))
    start = first.delta_pointer
    assert start["versions"] == {"orders": 1, "customer": 1}
    assert folded(published()) == expected(lake)
    seen = len(published())

    # several commits: a new BUILDING order, a price change, MACHINERY loses an order,
    # customer 5 moves HOUSEHOLD -> AUTOMOBILE (with its order), and a MERGE
    sql(spark, lake, "INSERT INTO {o} VALUES (16, 3, 1.25)")
    sql(spark, lake, "UPDATE {o} SET o_totalprice = 60.50 WHERE o_orderkey = 11")
    sql(spark, lake, "DELETE FROM {o} WHERE o_orderkey = 13")
    sql(spark, lake, "UPDATE {c} SET c_mktsegment = 'AUTOMOBILE' WHERE c_custkey = 5")
    sql(
        spark,
        lake,
        "MERGE INTO {o} t USING (SELECT 10L AS o_orderkey, 1L AS o_custkey, "
        "CAST(100.00 AS DECIMAL(15,2)) AS o_totalprice) s ON t.o_orderkey = s.o_orderkey "
        "WHEN MATCHED THEN UPDATE SET *",  # changes nothing AUTOMOBILE shows
    )

    with pytest.raises(RunFailed, match="broker went away"):
        asyncio.run(FailsBeforeCommit().run("delta"))
    assert len(published()) == seen  # its rows were aborted: read_committed sees none

    retry = asyncio.run(LakehouseFlow().run("delta"))
    assert retry.delta_pointer["versions"] == {"orders": 5, "customer": 2}
    assert sorted(published()[seen:]) == [
        ("A", "AUTOMOBILE", 2, Decimal("109.99")),
        ("A", "BUILDING", 3, Decimal("87.00")),
        ("A", "MACHINERY", 1, Decimal("3.00")),
        ("X", "HOUSEHOLD", None, None),
    ]
    assert folded(published()) == expected(lake)
    seen = len(published())

    again = asyncio.run(LakehouseFlow().run("delta"))  # nothing new: nothing goes out
    assert again.rows == {} and len(published()) == seen

    # the next batch: the last MACHINERY order goes, the customer of 12 moves to MACHINERY
    sql(spark, lake, "DELETE FROM {o} WHERE o_orderkey = 14")
    sql(spark, lake, "UPDATE {c} SET c_mktsegment = 'MACHINERY' WHERE c_custkey = 3")
    asyncio.run(LakehouseFlow().run("delta"))
    assert sorted(published()[seen:]) == [
        ("A", "BUILDING", 1, Decimal("60.50")),
        ("A", "MACHINERY", 2, Decimal("26.50")),
    ]
    assert folded(published()) == expected(lake)


def test_a_pointer_older_than_the_retained_changes_says_run_an_initial_load(lake, spark):
    asyncio.run(LakehouseFlow().run("initial"))
    sql(spark, lake, "UPDATE {o} SET o_totalprice = 1.00 WHERE o_orderkey = 15")
    sql(spark, lake, "DELETE FROM {o} WHERE o_orderkey = 12")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        sql(spark, lake, "OPTIMIZE {o}")
        sql(spark, lake, "VACUUM {o} RETAIN 0 HOURS")  # the change data files go
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")

    with pytest.raises(RunFailed) as caught:
        asyncio.run(LakehouseFlow().run("delta"))
    message = str(caught.value)
    assert "tpch.orders" in message and "after version 1" in message
    assert "run an initial load" in message

    asyncio.run(LakehouseFlow().run("initial"))  # what the error says to do
    assert folded(published()) == expected(lake)
