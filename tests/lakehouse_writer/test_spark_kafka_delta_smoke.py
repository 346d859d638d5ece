"""Spark reads a real topic (read_committed) and writes a real Delta table.

The table is then read back twice, by Spark and by an independent Delta reader (delta-rs via the
``deltalake`` package), and both must hold exactly the committed rows.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _produce(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    committed = [(f"k{i}", f"value-{i}") for i in range(20)]
    producer.begin_transaction()
    for i, (key, value) in enumerate(committed):
        producer.produce(topic, key=key, value=value, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key="ghost", value="aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    return committed


def test_spark_streams_committed_rows_into_delta(spark, kafka_bootstrap, new_topic, tmp_path):
    from deltalake import DeltaTable

    topic = new_topic(partitions=2)
    committed = _produce(kafka_bootstrap, topic)
    table_path = str(tmp_path / "smoke")

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        )
    )
    query = (
        stream.writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(table_path)
    )
    query.awaitTermination(120)
    assert query.exception() is None

    by_spark = sorted(
        (r.key, r.value) for r in spark.read.format("delta").load(table_path).collect()
    )
    columns = DeltaTable(table_path).to_pyarrow_table().to_pydict()
    by_delta_rs = sorted(zip(columns["key"], columns["value"], strict=True))
    assert by_spark == sorted(committed)
    assert by_delta_rs == by_spark
