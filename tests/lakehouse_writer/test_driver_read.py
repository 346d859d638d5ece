"""A small batch read by a consumer in the driver: the same rows as Spark's read, or none.

Real broker, real Spark. Topics hold committed and aborted transactions (one aborted at the
very end, one range holding nothing but an aborted transaction), rows outside transactions,
Confluent and single-object headers, bytes without a header and tombstones. For every range
asked, :class:`DriverRead` must give exactly the table that Spark's read of the same ranges
gives through :func:`~lakehouse_writer.read.scan.collect`: columns, types and rows. Where Kafka no
longer holds a range's offsets, or a range ends past a partition's end, the read gives up
(None: the writer then reads the batch by Spark, whose ``failOnDataLoss`` stops it) instead of
skipping or waiting for ever.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lakehouse_writer.read.driver_read import RAW_SCHEMA, DriverRead
from lakehouse_writer.read.ranges import OffsetRanges, range_read
from lakehouse_writer.read.scan import collect

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

CONFLUENT = b"\x00\x00\x00\x00\x2a"  # header of registry id 42
SINGLE = b"\xc3\x01" + bytes(range(8))  # header of a fingerprint


def _transaction(bootstrap: str, topic: str, rows: list[tuple], commit: bool) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"driver-read-{uuid.uuid4()}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition, key, value in rows:
        producer.produce(topic, key=key, value=value, partition=partition)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _by_spark(spark, bootstrap: str, ranges: OffsetRanges) -> pa.Table:
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "true",
    }
    frame = range_read(spark, options, ranges)
    assert frame is not None
    return collect(frame, []).raw


def _ordered(table: pa.Table) -> pa.Table:
    return table.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )


@pytest.fixture
def reader(kafka_bootstrap):
    read = DriverRead({"bootstrap.servers": kafka_bootstrap}, stall_s=2.0)
    yield read
    read.close()


def test_the_driver_reads_the_rows_spark_reads_of_the_same_ranges(
    spark, kafka_bootstrap, new_topic, reader
):
    events, plain = new_topic(partitions=2), new_topic()
    first = [
        (0, b"k1", CONFLUENT + b"body-1"),
        (1, b"k2", SINGLE + b"body-2"),
        (0, None, b"no header"),
        (1, b"k3", None),  # a tombstone
        (0, b"k4", b"\x00abc"),  # too short for a header
    ]
    _transaction(kafka_bootstrap, events, first, commit=True)
    _transaction(kafka_bootstrap, events, [(0, b"gone", CONFLUENT + b"aborted")], commit=False)
    _transaction(kafka_bootstrap, events, [(p, b"k5", CONFLUENT + b"b5") for p in (0, 1)], True)
    _transaction(kafka_bootstrap, events, [(1, b"gone", SINGLE + b"aborted")], commit=False)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3):
        producer.produce(plain, key=f"p{i}".encode(), value=CONFLUENT + bytes([i]))
    producer.flush(30)
    ends = {(events, p): end for p, end in _ends(kafka_bootstrap, events, 2).items()}
    ends[(plain, 0)] = _ends(kafka_bootstrap, plain, 1)[0]

    whole = {key: (0, end) for key, end in ends.items()}
    by_driver = reader.read(whole)
    assert by_driver is not None
    assert by_driver.schema == RAW_SCHEMA
    assert _ordered(by_driver).equals(_ordered(_by_spark(spark, kafka_bootstrap, whole)))
    assert by_driver.num_rows == len(first) + 2 + 3  # nothing aborted, nothing twice
    headers = dict(
        zip(
            by_driver.column("key").to_pylist(),
            by_driver.column("__header").to_pylist(),
            strict=True,
        )
    )
    assert headers[b"k1"] == CONFLUENT and headers[b"k2"] == SINGLE
    assert headers[None] is None and headers[b"k4"] is None and headers[b"k3"] is None

    middle = {(events, 0): (1, ends[(events, 0)] - 1), (plain, 0): (1, 2)}
    by_driver = reader.read(middle)
    assert by_driver is not None
    assert _ordered(by_driver).equals(_ordered(_by_spark(spark, kafka_bootstrap, middle)))
    rows = zip(
        by_driver.column("topic").to_pylist(), by_driver.column("offset").to_pylist(), strict=True
    )
    assert [offset for topic, offset in rows if topic == plain] == [1]


def test_a_range_of_only_an_aborted_transaction_reads_nothing_at_once(
    kafka_bootstrap, new_topic, reader
):
    topic = new_topic()
    _transaction(kafka_bootstrap, topic, [(0, b"a", b"1")], commit=True)  # offsets 0, 1
    _transaction(kafka_bootstrap, topic, [(0, b"b", b"2")] * 3, commit=False)  # 2..5
    end = _ends(kafka_bootstrap, topic, 1)[0]
    started = time.monotonic()
    read = reader.read({(topic, 0): (2, end)})
    assert read is not None and read.num_rows == 0
    assert time.monotonic() - started < 2.0  # not the stall limit: the position passed them
    assert reader.read({(topic, 0): (0, 0)}).num_rows == 0  # an empty range: nothing asked


def test_offsets_gone_from_kafka_or_past_the_end_give_the_read_up(
    kafka_bootstrap, kafka_admin, new_topic, reader
):
    topic = new_topic()
    _transaction(kafka_bootstrap, topic, [(0, b"a", b"1")] * 4, commit=True)  # offsets 0..4
    done = kafka_admin.delete_records([TopicPartition(topic, 0, 3)], request_timeout=30)
    assert next(iter(done.values())).result(timeout=30).low_watermark == 3
    started = time.monotonic()
    assert reader.read({(topic, 0): (1, 5)}) is None  # offsets 1 and 2 are gone
    assert reader.read({(topic, 0): (3, 9)}) is None  # 5..8 were never written
    assert time.monotonic() - started < 10.0
    read = reader.read({(topic, 0): (3, 5)})  # the consumer reads on after giving up
    assert read is not None and read.column("offset").to_pylist() == [3]


def test_a_failed_consumer_gives_the_read_up_and_the_next_read_makes_a_new_one(
    kafka_bootstrap, new_topic, reader
):
    topic = new_topic()
    _transaction(kafka_bootstrap, topic, [(0, b"a", b"1")], commit=True)  # offsets 0, 1
    assert reader.read({(topic, 0): (0, 2)}).num_rows == 1
    reader._consumer.close()  # a consumer gone bad under the writer
    assert reader.read({(topic, 0): (0, 2)}) is None  # the batch is read by Spark instead
    again = reader.read({(topic, 0): (0, 2)})
    assert again is not None and again.column("key").to_pylist() == [b"a"]
