"""A batch the driver applies whole, read by a Kafka consumer in the driver: no Spark job.

A micro-batch of at most ``max_rows`` messages is applied in the driver
(:meth:`~lakehouse_writer.route.router.Router.reads_whole`). Reading it
through Spark cost a job: its tasks start Kafka consumers, and the rows cross from the JVM into
Arrow. A librdkafka consumer in the driver reads the same offset ranges in a fraction of that time
(figures in ``docs/PERFORMANCE.md``): :class:`DriverRead` reads, with the library's one bounded
read loop (:func:`producer_lib.kafka.topic_reader.read_ranges`), exactly the ranges the batch's
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
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Message

from lakehouse_writer.read.framing import HEADER, header_array
from lakehouse_writer.read.ranges import OffsetRanges
from producer_lib.kafka.topic_reader import (
    TopicReadError,
    consumer_config,
    messages_to_arrow,
    read_ranges,
)

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

_MESSAGE_SCHEMA = pa.schema([f for f in RAW_SCHEMA if f.name != HEADER])
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
            messages = [
                message
                for got in read_ranges(
                    self._open(),
                    wanted,
                    stall_s=self._stall_s,
                    batch_size=_CONSUME_BATCH,
                    poll_s=_CONSUME_TIMEOUT_S,
                )
                for message in got
            ]
        except TopicReadError as exc:  # ReadStalled too: the consumer stopped short
            log.warning("batch read by Spark instead: the driver's consumer: %s", exc)
            return None
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer is closed
            log.warning("batch read by Spark instead: the driver's consumer failed: %s", exc)
            with suppress(KafkaException, RuntimeError):
                self.close()
            self._consumer = None  # the next batch starts with a new one
            return None
        return _table(messages)

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                consumer_config(
                    self._conf,
                    purpose="lakehouse-writer-batch",
                    enable_auto_offset_store=False,
                    fetch_wait_max_ms=10,  # as the Kafka source's kafka.fetch.max.wait.ms
                )
            )
        return self._consumer


def _table(messages: list[Message]) -> pa.Table:
    """One Arrow table of the messages, partition after partition, each in offset order."""
    read = messages_to_arrow(messages, _MESSAGE_SCHEMA).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    values = read.column("value").combine_chunks()
    return read.add_column(3, RAW_SCHEMA.field(HEADER), header_array(values))
