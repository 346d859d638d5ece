"""The tight produce loop over pre-encoded key and value buffers.

One ``produce()`` call per message and nothing else in the loop: no delivery callback except
on the few marked messages (the first and last of each partition), no keyword arguments,
no per-row numpy scalars. A full local queue (``BufferError``) is waited out with ``poll``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Producer

from producer_lib.kafka._target import Target
from producer_lib.kafka.partitioner import partitions_for_keys

__all__ = ["EncodedBatch", "encode_batch", "encoded_ahead", "marked_rows", "send_batch"]

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
    """

    keys: bytes
    key_offsets: list[int]
    values: bytes
    value_offsets: list[int]
    partitions: list[int]
    rows_per_partition: dict[int, int]
    marks: list[int]

    @classmethod
    def from_buffers(
        cls,
        keys: tuple[np.ndarray, np.ndarray],
        values: tuple[np.ndarray, np.ndarray],
        partitions: np.ndarray,
        partition_count: int,
    ) -> EncodedBatch:
        """Build from the encoder's ``(buf, offsets)`` pairs and a partition array."""
        counts = np.bincount(partitions, minlength=partition_count).tolist()
        return cls(keys[0].tobytes(), keys[1].tolist(), values[0].tobytes(),
                   values[1].tolist(), partitions.tolist(),
                   {p: n for p, n in enumerate(counts) if n},
                   marked_rows(partitions))  # fmt: skip

    def __len__(self) -> int:
        return len(self.partitions)


def encode_batch(
    target: Target,
    batch: pa.RecordBatch | pa.Table,
    constants: tuple[dict[str, Any], dict[str, Any]],
    partition: int | None,
) -> EncodedBatch:
    """Encode and frame keys and values of ``batch`` and pick each row's partition.

    Args:
        target: Where the rows go.
        batch: The rows.
        constants: Key and value constants (technical fields).
        partition: Explicit partition of every row, or None for murmur2 of the key.

    Raises:
        EncodeError: A value does not fit the schema.
    """
    keys = target.key_encoder.encode_buffer(batch, constants[0], target.key_header)
    values = target.value_encoder.encode_buffer(batch, constants[1], target.value_header)
    if partition is None:
        parts = partitions_for_keys(keys[0], keys[1], target.partitions)
    else:
        parts = np.full(batch.num_rows, partition, dtype=np.int64)
    return EncodedBatch.from_buffers(keys, values, parts, target.partitions)


def marked_rows(partitions: np.ndarray) -> list[int]:
    """Rows that are the first or the last of their partition, ascending (one pass each)."""
    if len(partitions) == 0:
        return []
    _, first = np.unique(partitions, return_index=True)
    _, from_end = np.unique(partitions[::-1], return_index=True)
    last = len(partitions) - 1 - from_end
    return sorted({*first.tolist(), *last.tolist()})


def encoded_ahead(
    reader: pa.RecordBatchReader,
    target: Target,
    constants: tuple[dict[str, Any], dict[str, Any]],
    partition: int | None,
) -> Iterator[EncodedBatch]:
    """Encoded batches of ``reader``; the next one is read and encoded while one is sent.

    numpy and Arrow release the GIL for their column work, so encoding batch n+1 on a worker
    thread overlaps the produce loop of batch n. At most two batches are held at a time.
    """

    def encode_next() -> EncodedBatch | None:
        batch = next(iter_batches, None)
        return None if batch is None else encode_batch(target, batch, constants, partition)

    iter_batches = iter(reader)
    with ThreadPoolExecutor(1, thread_name_prefix="encode") as pool:
        pending = pool.submit(encode_next)
        while (encoded := pending.result()) is not None:
            pending = pool.submit(encode_next)
            yield encoded


def send_batch(
    producer: Producer,
    topic: str,
    batch: EncodedBatch,
    on_delivery: Callable[[Any, Any], None],
) -> None:
    """Produce every row of ``batch``; only its marked rows get ``on_delivery``."""
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
