"""Read a topic back as a test would see it: every visible message, then stop."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition


def consume_all(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 30.0
) -> list[Message]:
    """Return all messages of ``topic`` visible at ``isolation``, in partition/offset order.

    Partitions are assigned directly (no consumer group to wait for) and read from the start
    until each reports end-of-partition: the high watermark for ``read_uncommitted``, the last
    stable offset for ``read_committed``.
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
                    pending.discard(msg.partition())
                    continue
                raise RuntimeError(f"consuming {topic}: {msg.error()}")
            messages.append(msg)
    finally:
        consumer.close()
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))
