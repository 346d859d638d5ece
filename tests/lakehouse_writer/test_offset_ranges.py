"""The Kafka offset ranges of a ``foreachBatch`` frame, read from its plan (no Spark job).

Real broker, real Spark: a streaming query over topics whose names end the way a Kafka topic
partition's text does (``name-7``, dots and dashes), with rows on some partitions only. The
ranges read from the text of the batch's input partitions (one py4j call) must equal those
read partition by partition, and what was produced.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from lakehouse_writer.read.ranges import _from_text, _walked, offset_ranges

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_the_ranges_read_from_the_plans_text_are_those_of_each_partition(
    spark, kafka_bootstrap, kafka_admin, tmp_path
):
    tag = uuid.uuid4().hex[:8]
    topics = [f"t-ranges-{tag}-7", f"t.ranges.{tag}-12-3"]
    futures = kafka_admin.create_topics([NewTopic(t, num_partitions=2) for t in topics])
    for future in futures.values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for topic, partition, count in ((topics[0], 0, 3), (topics[0], 1, 1), (topics[1], 1, 5)):
        for _ in range(count):
            producer.produce(topic, value=b"x", partition=partition)
    producer.flush(30)
    seen: list[Any] = []

    def batch(df: Any, _: int) -> None:
        convert = spark._jvm.scala.jdk.javaapi.CollectionConverters
        pending = [df._jdf.queryExecution().analyzed().rdd()]
        while pending:
            rdd = pending.pop()
            if rdd.getClass().getSimpleName() == "DataSourceRDD":
                seen.append((offset_ranges(df), _from_text(rdd), _walked(rdd, spark)))
                return
            pending += [d.rdd() for d in convert.asJava(rdd.dependencies())]

    try:
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", ",".join(topics))
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(batch)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        query.awaitTermination(120)
    finally:
        for future in kafka_admin.delete_topics(topics).values():
            future.result(timeout=30)

    [(ranges, from_text, walked)] = seen
    assert ranges == from_text == walked
    produced = {(topics[0], 0): (0, 3), (topics[0], 1): (0, 1), (topics[1], 1): (0, 5)}
    assert {k: v for k, v in ranges.items() if v[1] > v[0]} == produced
