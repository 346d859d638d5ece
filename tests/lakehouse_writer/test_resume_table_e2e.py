"""A table stopped by an incompatible schema change, fixed, resumed, and applied again.

All through the commands an operator runs: ``lakehouse-writer run --once``, ``status``,
``resume-table``, with the real broker and Spark.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from lakehouse_writer.cli import main
from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ORDERS = sample_schema("ORDERS")


def _orders_v2() -> ValueSchema:
    """ORDERS with AMOUNT turned from decimal into text: not a widening, the table stops."""
    schema = ValueSchema("ORDERS", "SHOP", doc="orders of the shop")
    schema.add_field("ID", AvroLong(), doc="order id", nullable=False)
    schema.add_field("NAME", AvroNVarchar(40), doc="customer name")
    schema.add_field("REGION", AvroNVarchar(10))
    schema.add_field("AMOUNT", AvroNVarchar(20))
    schema.add_primary_key("ID")
    return schema


def _row(i: int, amount: object, t: int) -> dict[str, object]:
    return {
        "ID": i,
        "NAME": f"n{i}",
        "AMOUNT": amount,
        "__change_type": "I",
        "__change_time": T0 + t,
    }


def test_a_stopped_table_fixed_and_resumed_takes_the_next_runs_rows(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, capsys
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    v2 = _orders_v2()
    publish_schemas(kafka_bootstrap, topic, schemas, ORDERS)
    publish_schemas(kafka_bootstrap, topic, schemas, v2)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    monkeypatch.setenv("LAKEHOUSE_MONITOR_GROUP", "off")
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    where = ["--lakehouse", str(lake), "--checkpoint", str(checkpoint)]
    run = ["run", *where, "--once", "--topics", topic, "--bootstrap-servers", kafka_bootstrap]
    table = str(lake / "SHOP" / "ORDERS")

    produce_transaction(
        kafka_bootstrap, topic, ORDERS, [_row(1, Decimal("1.50"), 1), _row(2, Decimal("2.00"), 1)]
    )
    assert main(run) == 0
    produce_transaction(kafka_bootstrap, topic, v2, [_row(3, "12,50 EUR", 2)])
    assert main(run) == 0
    capsys.readouterr()

    assert main(["status", *where]) == 1
    out = capsys.readouterr().out
    assert "SHOP.ORDERS: " in out and "AMOUNT" in out
    assert "PROBLEM: table SHOP.ORDERS is stopped; fix it, then resume-table SHOP.ORDERS" in out

    # the fix: the table takes AMOUNT as text, as the producer now sends it
    fixed = (
        spark.read.format("delta").load(table).withColumn("AMOUNT", F.col("AMOUNT").cast("string"))
    )
    fixed.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(table)
    assert main(["resume-table", "SHOP.ORDERS", *where]) == 0
    assert "resumed SHOP.ORDERS" in capsys.readouterr().out
    assert main(["status", *where]) == 0, capsys.readouterr().out

    produce_transaction(kafka_bootstrap, topic, v2, [_row(4, "7 EUR", 3)])
    assert main(run) == 0
    rows = spark.read.format("delta").load(table).collect()
    assert sorted((r.ID, r.AMOUNT) for r in rows) == [(1, "1.50"), (2, "2.00"), (4, "7 EUR")]
    rejected = spark.read.format("delta").load(str(lake / "_rejected")).collect()
    assert [(r.table, r.offset) for r in rejected] == [("SHOP.ORDERS", 3)]  # row 3, still there
    capsys.readouterr()
    assert main(["status", *where]) == 0, capsys.readouterr().out
