"""A batch the driver applies whole, read by a Kafka consumer in the driver: no Spark job.

A micro-batch of at most ``max_rows`` messages is applied in the driver
(:meth:`~lakehouse_writer.route.router.Router.reads_whole`). Reading it
through Spark cost a job: its tasks start Kafka consumers, and the rows cross from the JVM into
Arrow. A librdkafka consumer in the driver reads the same offset ranges in a fraction of that time
(figures in ``docs/PERFORMANCE.md``): :class:`DriverRead` reads exactly the ranges the batch's
plan reads (:attr:`~lakehouse_writer.read.holdback.Plan.reads`: Spark's ranges for the
micro-batch, the rows held back before in front, cut where transactions are held back), with
the Kafka source's guarantees:

- only committed rows (``read_committed``), every offset of each range read or accounted for:
  a partition is done when the consumer's position reaches the range's end (librdkafka steps
  over transaction markers and aborted rows, and moves the position past them);
- nothing skipped silently: where a range's offsets are no longer in Kafka the consumer does
  not move its start (``auto.offset.reset=error``) but reports it, and the read gives up;
  so does a read that stops moving (no row and no position change for ``stall_s``), and one
  whose consumer fails (it is made again for the next batch). Given up, the batch is read
  by Spark's job as before, whose ``failOnDataLoss`` fails it with the message
  :mod:`lakehouse_writer.runtime.data_loss` turns into one line.

The rows come as the Arrow table :func:`~lakehouse_writer.read.scan.collect` counts: ``topic``,
``partition``, ``offset``, the header, ``key`` and ``value``, the same columns and types as
Spark's read gives, each partition's rows in offset order.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from lakehouse_writer.read.framing import HEADER, header_array
from lakehouse_writer.read.ranges import OffsetRanges

log = logging.getLogger(__name__)

RAW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field(HEADER, pa.binary()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)

_CONSUME_BATCH = 10_000  # messages taken from librdkafka's queue per call
_CONSUME_TIMEOUT_S = 0.005  # a call that finds nothing returns after this; positions checked


class DriverRead:
    """Reads offset ranges into the driver with one consumer, kept open between batches.

    Args:
        kafka_conf: The writer's librdkafka settings (security included; never logged).
        stall_s: A read that gets no row and moves no position for this long gives up.
    """

    def __init__(self, kafka_conf: Mapping[str, Any], stall_s: float = 10.0) -> None:
        self._conf = dict(kafka_conf)
        self._stall_s = stall_s
        self._consumer: Consumer | None = None

    def close(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def read(self, ranges: OffsetRanges) -> pa.Table | None:
        """The committed rows of ``ranges`` (``[from, until)`` per partition), in Arrow.

        None when the read gave up (see the module); the caller then reads them by Spark.
        """
        wanted = {key: span for key, span in sorted(ranges.items()) if span[1] > span[0]}
        if not wanted:
            return RAW_SCHEMA.empty_table()
        try:
            rows = self._read(wanted)
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer is closed
            log.warning("batch read by Spark instead: the driver's consumer failed: %s", exc)
            with suppress(KafkaException, RuntimeError):
                self.close()
            self._consumer = None  # the next batch starts with a new one
            return None
        return None if rows is None else _table(rows)

    def _read(self, wanted: OffsetRanges) -> dict[tuple[str, int], _Rows] | None:
        consumer = self._open()
        assigned = [TopicPartition(t, p, first) for (t, p), (first, _) in wanted.items()]
        consumer.assign(assigned)
        try:
            return self._consume(consumer, wanted)
        finally:
            # Resumed before they go: a partition paused when unassigned and assigned again
            # later waited about 1 s for its first fetch (librdkafka 2.16).
            consumer.resume(assigned)
            consumer.unassign()

    def _consume(
        self, consumer: Consumer, wanted: OffsetRanges
    ) -> dict[tuple[str, int], _Rows] | None:
        rows = {key: _Rows() for key in wanted}
        pending = dict(wanted)
        moved, seen = time.monotonic(), _positions(consumer, pending)
        while pending:
            for message in consumer.consume(_CONSUME_BATCH, _CONSUME_TIMEOUT_S):
                error = message.error()
                if error is not None:  # no partition EOF events: they are turned off
                    log.warning("batch read by Spark instead: the driver's consumer got %s", error)
                    return None
                key = (message.topic() or "", message.partition() or 0)
                span = pending.get(key)
                offset = message.offset() or 0
                if span is not None and offset < span[1]:
                    rows[key].add(offset, message.key(), message.value())
            now = _positions(consumer, pending)
            done = [key for key, at in now.items() if at >= pending[key][1]]
            if done:
                consumer.pause([TopicPartition(t, p) for t, p in done])
                for key in done:
                    del pending[key]
            if now != seen:
                moved, seen = time.monotonic(), now
            elif time.monotonic() - moved > self._stall_s:
                stuck = {f"{t}/{p}": [now[(t, p)], end] for (t, p), (_, end) in pending.items()}
                log.warning(
                    "batch read by Spark instead: the driver's consumer stopped short "
                    "partitions=%s (position, end) in %.0f s",
                    stuck,
                    self._stall_s,
                )
                return None
        return rows

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._conf,
                    "group.id": f"lakehouse-writer-batch-{uuid.uuid4()}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "error",  # a range gone from Kafka: said, not skipped
                    "enable.partition.eof": False,
                    "fetch.wait.max.ms": 10,  # as the Kafka source's kafka.fetch.max.wait.ms
                }
            )
        return self._consumer


class _Rows:
    """One partition's rows as read: offsets, keys and values."""

    __slots__ = ("keys", "offsets", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []

    def add(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.offsets.append(offset)
        self.keys.append(key)
        self.values.append(value)


def _positions(consumer: Consumer, pending: OffsetRanges) -> dict[tuple[str, int], int]:
    """The consumer's position (the next offset to give) per pending partition."""
    asked = [TopicPartition(t, p) for t, p in pending]
    return {(tp.topic, tp.partition): tp.offset for tp in consumer.position(asked)}


def _table(rows: Mapping[tuple[str, int], _Rows]) -> pa.Table:
    """One Arrow table of the partitions' rows, partition after partition."""
    parts = []
    for (topic, partition), got in rows.items():
        n = len(got.offsets)
        if not n:
            continue
        values = pa.array(got.values, pa.binary())
        parts.append(
            pa.table(
                [
                    pa.array([topic] * n, pa.string()),
                    pa.array([partition] * n, pa.int32()),
                    pa.array(got.offsets, pa.int64()),
                    header_array(values),
                    pa.array(got.keys, pa.binary()),
                    values,
                ],
                schema=RAW_SCHEMA,
            )
        )
    return pa.concat_tables(parts) if parts else RAW_SCHEMA.empty_table()
