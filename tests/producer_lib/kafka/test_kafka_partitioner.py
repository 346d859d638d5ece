"""murmur2 partitioning matches Kafka's Java client and librdkafka's murmur2_random."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from confluent_kafka import Producer

from producer_lib.kafka._encode import marked_rows
from producer_lib.kafka.partitioner import murmur2, partitions_for_keys


def _buffer(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    buf = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8)
    return buf, np.cumsum([0] + [len(k) for k in keys]).astype(np.int64)


# Expected values from Kafka's own UtilsTest.testMurmur2 (Java ints).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_java():
    keys = list(JAVA_VECTORS)
    hashes = murmur2(*_buffer(keys)).view(np.int32).tolist()
    assert hashes == list(JAVA_VECTORS.values())


@pytest.mark.kafka
def test_partitions_match_librdkafka_murmur2(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=7)
    rng = np.random.default_rng(7)
    keys = [rng.bytes(int(n)) for n in rng.integers(1, 40, 300)]
    seen: list[tuple[bytes, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "partitioner": "murmur2_random",
            "client.id": f"p-{uuid.uuid4().hex}",
        }
    )
    for key in keys:
        producer.produce(
            topic, b"v", key, on_delivery=lambda err, msg: seen.append((msg.key(), msg.partition()))
        )
    producer.flush(30)
    expected = dict(zip(keys, partitions_for_keys(*_buffer(keys), 7).tolist(), strict=True))
    assert len(seen) == 300
    assert all(expected[key] == partition for key, partition in seen)


def test_single_partition_is_zero():
    assert partitions_for_keys(*_buffer([b"a", b"bc"]), 1).tolist() == [0, 0]


def _first_and_last_by_scan(partitions: list[int]) -> list[int]:
    first = {p: partitions.index(p) for p in set(partitions)}
    last = {p: len(partitions) - 1 - partitions[::-1].index(p) for p in set(partitions)}
    return sorted({*first.values(), *last.values()})


@pytest.mark.parametrize(
    "partitions",
    [[], [0], [2, 2, 2], [0, 1, 0, 1], [5, 0, 5, 3, 3, 0]],  # partitions without rows too
)
def test_marked_rows_are_first_and_last_of_each_partition(partitions):
    assert marked_rows(np.array(partitions, dtype=np.int64)) == _first_and_last_by_scan(partitions)


def test_marked_rows_of_many_random_partitions():
    rng = np.random.default_rng(3)
    partitions = rng.integers(0, 40, 5_000)
    assert marked_rows(partitions) == _first_and_last_by_scan(partitions.tolist())
