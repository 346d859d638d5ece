"""The tight produce loop over encoded key and value buffers.

One ``produce()`` call per message and nothing else in the loop: no delivery callback except
on the few marked messages (the first and last of each partition), no keyword arguments,
no per-row numpy scalars. A full local queue (``BufferError``) is waited out with ``poll``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from producer_lib.errors import ProduceError
from producer_lib.kafka._encode import EncodedBuffers, Layout
from producer_lib.kafka._target import Target

__all__ = ["EncodedBatch", "RowRejected", "rejected_row_error", "send_batch"]

QUEUE_FULL_WAIT_S = 0.05  # let librdkafka drain its queue to the broker, then try again


@dataclass(frozen=True)
class EncodedBatch:
    """Framed keys and values of a batch, ready to send.

    Attributes:
        keys: All key bytes, concatenated.
        key_offsets: ``rows + 1`` offsets into ``keys``.
        values: All value bytes, concatenated.
        value_offsets: ``rows + 1`` offsets into ``values``.
        partitions: Partition per row.
        rows_per_partition: Rows per partition (those with rows).
        marks: Rows that are the first or last of their partition (they get a callback).
        source: The rows themselves (to name a row Kafka refuses), when at hand.
    """

    keys: bytes
    key_offsets: list[int]
    values: bytes
    value_offsets: list[int]
    partitions: list[int]
    rows_per_partition: dict[int, int]
    marks: list[int]
    source: pa.RecordBatch | pa.Table | None = None

    @classmethod
    def from_buffers(
        cls,
        buffers: EncodedBuffers,
        source: pa.RecordBatch | pa.Table | None = None,
        layout: Layout | None = None,
    ) -> EncodedBatch:
        """The batch of :func:`~producer_lib.kafka._encode.encode_batch`'s buffers.

        Args:
            buffers: The encoded batch.
            source: The rows it was encoded from (to name a row Kafka refuses).
            layout: Its layout, when already computed (by the encoder process).
        """
        layout = layout or buffers.layout()
        return cls(
            buffers.keys.tobytes(),
            buffers.key_offsets.tolist(),
            buffers.values.tobytes(),
            buffers.value_offsets.tolist(),
            buffers.partitions.tolist(),
            layout.rows_per_partition,
            layout.marks,
            source,
        )

    def sizes(self, row: int) -> tuple[int, int]:
        """Key and value bytes of ``row``."""
        return (
            self.key_offsets[row + 1] - self.key_offsets[row],
            self.value_offsets[row + 1] - self.value_offsets[row],
        )

    def __len__(self) -> int:
        return len(self.partitions)


class RowRejected(Exception):
    """librdkafka refused a row at ``produce()`` (too large, unknown partition...).

    Attributes:
        row: Index of the row in its batch.
        error: librdkafka's error.
        cause: The exception ``produce()`` raised.
    """

    def __init__(self, row: int, cause: KafkaException) -> None:
        self.row = row
        self.cause = cause
        arg = cause.args[0] if cause.args else None
        self.error: KafkaError | None = arg if isinstance(arg, KafkaError) else None
        super().__init__(f"row {row}: {self.error or cause}")


def send_batch(
    producer: Producer,
    topic: str,
    batch: EncodedBatch,
    on_delivery: Callable[[Any, Any], None],
) -> None:
    """Produce every row of ``batch``; only its marked rows get ``on_delivery``.

    Raises:
        RowRejected: librdkafka refused a row; the rows before it were sent.
    """
    start = 0
    for mark in batch.marks:
        _send_range(producer, topic, batch, start, mark, None)
        _send_range(producer, topic, batch, mark, mark + 1, on_delivery)
        start = mark + 1
    _send_range(producer, topic, batch, start, len(batch.partitions), None)


def _send_range(
    producer: Producer,
    topic: str,
    batch: EncodedBatch,
    start: int,
    stop: int,
    on_delivery: Callable[[Any, Any], None] | None,
) -> None:
    produce, poll = producer.produce, producer.poll
    keys, kofs, values, vofs = batch.keys, batch.key_offsets, batch.values, batch.value_offsets
    parts = batch.partitions
    for i in range(start, stop):
        key = keys[kofs[i] : kofs[i + 1]]
        value = values[vofs[i] : vofs[i + 1]]
        while True:
            try:
                if on_delivery is None:
                    produce(topic, value, key, parts[i])
                else:
                    produce(topic, value, key, parts[i], on_delivery)
                break
            except BufferError:
                poll(QUEUE_FULL_WAIT_S)
            except KafkaException as exc:
                raise RowRejected(i, exc) from exc


def key_of_row(source: pa.RecordBatch | pa.Table | None, row: int, target: Target) -> Any:
    """The key columns of ``row`` as ``{column: value}`` (None without the source rows)."""
    names = [name for name in target.value_schema.pks if source and name in source.column_names]
    if source is None or not names:
        return None
    return {name: source.column(name)[row].as_py() for name in names}


def size_error_text(key_bytes: int, value_bytes: int, limit: int) -> str:
    """Why a row is too large and what to do about it."""
    return (
        f"the row is {key_bytes + value_bytes:,} bytes encoded (key {key_bytes:,}, value "
        f"{value_bytes:,}), over message.max.bytes={limit:,}; shorten the row, or raise "
        "message.max.bytes (KAFKA_OVERRIDES) and the topic's max.message.bytes together"
    )


def rejected_row_error(
    target: Target,
    batch: EncodedBatch,
    rejected: RowRejected,
    rows_before: int | None,
    limit: int,
) -> ProduceError:
    """The error of a row librdkafka refused, naming topic, table, row, key and sizes.

    Args:
        target: Where the row went.
        batch: Its batch.
        rejected: What :func:`send_batch` raised for it.
        rows_before: Rows of the same call sent before this batch (None for one row).
        limit: ``message.max.bytes`` of the producer.
    """
    key_bytes, value_bytes = batch.sizes(rejected.row)
    error = rejected.error
    too_large = error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    if too_large:
        text = size_error_text(key_bytes, value_bytes, limit)
    else:
        text = f"Kafka refused the row: {error or rejected.cause}"
    position = None if rows_before is None else rows_before + rejected.row + 1
    return ProduceError(
        f"{text}; the transaction was aborted",
        topic=target.topic,
        table=target.table,
        row=position,
        key=key_of_row(batch.source, rejected.row, target),
        size_bytes=key_bytes + value_bytes if too_large else None,
        limit_bytes=limit if too_large else None,
    )
