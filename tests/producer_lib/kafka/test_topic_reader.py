"""The one bounded read loop, against the real broker: ends, ranges, markers, stalls, errors."""

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from producer_lib.kafka.topic_reader import (
    MESSAGE_SCHEMA,
    ReadStalled,
    TopicReadError,
    consumer,
    consumer_config,
    high_watermarks,
    ranges_to_end,
    read_ranges,
    read_ranges_arrow,
)

pytestmark = pytest.mark.kafka


def transactional(bootstrap):
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-reader-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    return producer


def produce(bootstrap, topic, values, *, partition=0, abort=False):
    """``values`` in one transaction on ``partition`` (committed unless ``abort``)."""
    producer = transactional(bootstrap)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, key=value[:1], partition=partition)
    producer.flush(30)
    (producer.abort_transaction if abort else producer.commit_transaction)(30)


def read_values(bootstrap, ranges, **options):
    with consumer({"bootstrap.servers": bootstrap}) as client:
        return [m.value() for ms in read_ranges(client, ranges, **options) for m in ms]


def test_the_defaults_are_those_of_a_bounded_read_and_overrides_win() -> None:
    conf = consumer_config({"bootstrap.servers": "x:1"}, purpose="flow-pointer")
    assert conf["group.id"].startswith("flow-pointer-")
    assert conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_committed"
    assert conf["auto.offset.reset"] == "error"
    mine = consumer_config({"bootstrap.servers": "x:1"}, group_id="g", enable_partition_eof=False)
    assert mine["group.id"] == "g" and mine["enable.partition.eof"] is False


def test_reads_every_committed_message_to_the_end_and_none_aborted(
    kafka_bootstrap, new_topic
) -> None:
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [b"a1", b"a2"], partition=0)
    produce(kafka_bootstrap, topic, [b"x1"], partition=0, abort=True)
    produce(kafka_bootstrap, topic, [b"b1", b"b2", b"b3"], partition=1)
    with consumer({"bootstrap.servers": kafka_bootstrap}) as client:
        ranges = ranges_to_end(client, topic, timeout_s=10)
        assert ranges == {(topic, 0): (0, 5), (topic, 1): (0, 4)}  # markers count as offsets
        started = time.monotonic()
        values = sorted(m.value() for ms in read_ranges(client, ranges, stall_s=10) for m in ms)
    assert values == [b"a1", b"a2", b"b1", b"b2", b"b3"]
    assert time.monotonic() - started < 5  # done by position, not by waiting


def test_a_range_gives_exactly_its_offsets(kafka_bootstrap, new_topic) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"v{i}".encode() for i in range(10)])  # offsets 0-9
    assert read_values(kafka_bootstrap, {(topic, 0): (3, 6)}, stall_s=10) == [b"v3", b"v4", b"v5"]
    assert read_values(kafka_bootstrap, {(topic, 0): (4, 4)}, stall_s=10) == []


def test_arrow_holds_the_ranges_partition_after_partition(kafka_bootstrap, new_topic) -> None:
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [b"p0a", b"p0b"], partition=0)
    produce(kafka_bootstrap, topic, [b"p1a", b"p1b", b"p1c"], partition=1)
    with consumer({"bootstrap.servers": kafka_bootstrap}, enable_partition_eof=False) as client:
        table = read_ranges_arrow(client, {(topic, 1): (0, 3), (topic, 0): (1, 2)}, stall_s=10)
    assert table.schema == MESSAGE_SCHEMA
    assert table.column("value").to_pylist() == [b"p0b", b"p1a", b"p1b", b"p1c"]
    assert table.column("offset").to_pylist() == [1, 0, 1, 2]
    assert table.column("key").to_pylist() == [b"p", b"p", b"p", b"p"]


def test_an_open_transaction_ends_the_committed_range_and_stalls_a_longer_one(
    kafka_bootstrap, new_topic
) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, [b"done"])
    open_txn = transactional(kafka_bootstrap)
    open_txn.begin_transaction()
    open_txn.produce(topic, value=b"pending", partition=0)
    open_txn.flush(30)
    try:
        with consumer({"bootstrap.servers": kafka_bootstrap}) as client:
            ranges = ranges_to_end(client, topic, timeout_s=10)
            assert ranges == {(topic, 0): (0, 2)}  # read_committed: the last stable offset
            assert [m.value() for ms in read_ranges(client, ranges, stall_s=5) for m in ms] == [
                b"done"
            ]
            seen = []
            with pytest.raises(ReadStalled) as caught:
                for messages in read_ranges(client, {(topic, 0): (0, 3)}, stall_s=1.5):
                    seen += [m.value() for m in messages]
        assert seen == [b"done"]  # what was committed came before the stall
        assert caught.value.topic == topic and caught.value.partition == 0
        assert caught.value.offset == 2 and caught.value.end == 3  # position, high watermark
        assert caught.value.left == {f"{topic}/0": [2, 3]}
        assert high_watermarks({"bootstrap.servers": kafka_bootstrap}, topic, timeout_s=10) == {
            0: 3
        }
    finally:
        open_txn.abort_transaction(30)


def test_a_read_to_the_high_watermark_ends_once_the_open_transaction_commits(
    kafka_bootstrap, new_topic
) -> None:
    topic = new_topic()
    open_txn = transactional(kafka_bootstrap)
    open_txn.begin_transaction()
    open_txn.produce(topic, value=b"late", partition=0)
    open_txn.flush(30)
    conf = {"bootstrap.servers": kafka_bootstrap}
    ends = high_watermarks(conf, topic, timeout_s=10)
    committer = threading.Timer(1.0, open_txn.commit_transaction, args=(30,))
    committer.start()
    try:
        with consumer(conf) as client:
            ranges = ranges_to_end(client, topic, timeout_s=10, ends=ends)
            got = [m.value() for ms in read_ranges(client, ranges, stall_s=10) for m in ms]
    finally:
        committer.join()
    assert ranges == {(topic, 0): (0, 1)} and got == [b"late"]


def test_a_missing_topic_is_none_and_a_gone_offset_an_error(kafka_bootstrap, new_topic) -> None:
    with consumer({"bootstrap.servers": kafka_bootstrap}) as client:
        assert ranges_to_end(client, f"t_missing_{uuid.uuid4().hex}", timeout_s=10) is None
    topic = new_topic()
    produce(kafka_bootstrap, topic, [b"only"])
    with pytest.raises(TopicReadError) as caught:
        read_values(kafka_bootstrap, {(topic, 0): (50, 60)}, stall_s=10)
    assert caught.value.topic == topic and caught.value.partition == 0
    assert not isinstance(caught.value, ReadStalled)  # said at once, not waited out
