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

    :func:`read_topic` with only the bootstrap servers.
    """
    return read_topic({"bootstrap.servers": bootstrap}, topic, isolation, timeout_s)


def read_topic(
    conf: dict[str, str], topic: str, isolation: str = "read_committed", timeout_s: float = 30.0
) -> list[Message]:
    """Every message of ``topic`` a client with ``conf`` sees at ``isolation``, in order.

    Partitions are assigned directly (no consumer group to wait for) and read from the start
    until each reports end-of-partition at its high watermark as it was when the call began.
    For ``read_committed`` an earlier end is not the end: ``commit_transaction`` returns
    before the broker has written the commit markers to every partition, and until then the
    last stable offset (where a committed reader stops) lags behind. A topic that does not
    exist holds nothing; any other metadata error (a refused ACL) is raised, so an empty
    result never hides a reader that may not read. A ``group.id`` in ``conf`` is used as
    given (a principal may be allowed only its own groups); none is ever committed.
    """
    consumer = Consumer(
        {
            "group.id": f"test-{uuid.uuid4().hex}",
            **conf,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None and meta.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise RuntimeError(f"{topic}: {meta.error}")
        partitions = list(meta.partitions)
        ends = _high_watermarks(conf, topic, partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return _drain(consumer, topic, ends, time.monotonic() + timeout_s)
    finally:
        consumer.close()


def _drain(consumer: Consumer, topic: str, ends: dict[int, int], deadline: float) -> list[Message]:
    """Poll until every partition reported its end at or past ``ends``."""
    pending = set(ends)
    messages: list[Message] = []
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: partitions {sorted(pending)} never reached their end")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"consuming {topic}: {msg.error()}")
            if msg.offset() >= ends[msg.partition()]:
                pending.discard(msg.partition())
            continue
        messages.append(msg)
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))


def _high_watermarks(conf: dict[str, str], topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """End offsets including open and unfinished transactions (a read_uncommitted view)."""
    probe = Consumer(
        {"group.id": f"hw-{uuid.uuid4().hex}", **conf, "isolation.level": "read_uncommitted"}
    )
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in partitions
        }
    finally:
        probe.close()
