"""Read a topic back as a test would see it: every visible message, then stop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition


def consume_all(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 30.0
) -> list[Message]:
    """Return all messages of ``topic`` visible at ``isolation``, in partition/offset order.

    Partitions are assigned directly (no consumer group to wait for) and read from the start
    until each reports end-of-partition at its high watermark as it was when the call began.
    For ``read_committed`` an earlier end is not the end: ``commit_transaction`` returns
    before the broker has written the commit markers to every partition, and until then the
    last stable offset (where a committed reader stops) lags behind.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = _high_watermarks(bootstrap, topic, partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    pending = set(partitions)
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} never reached their end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends[msg.partition()]:
                        pending.discard(msg.partition())
                    continue
                raise RuntimeError(f"consuming {topic}: {msg.error()}")
            messages.append(msg)
    finally:
        consumer.close()
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))


def _high_watermarks(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """End offsets including open and unfinished transactions (a read_uncommitted view)."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4().hex}",
                      "isolation.level": "read_uncommitted"})  # fmt: skip
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in partitions
        }
    finally:
        probe.close()
