"""Encoding one batch of change rows: framed keys and values, and each row's partition.

:func:`encode_batch` is the one place a batch is encoded, wherever it runs: in the flow's
thread (``produce_row``, small exports) and in the encoder process (large exports,
:mod:`producer_lib.kafka._encode_worker`), which rebuilds the same :class:`Encoding` from its
picklable :class:`EncodingRecipe`. Its result stays in numpy buffers; what the send loop
needs from them (bytes, offsets, counts per partition) is made by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from producer_lib.kafka.partitioner import partitions_for_keys
from producer_lib.schema.encoder import AvroEncoder

__all__ = [
    "Constants",
    "EncodedBuffers",
    "Encoding",
    "EncodingRecipe",
    "Layout",
    "encode_batch",
    "marked_rows",
]

Constants = tuple[dict[str, Any], dict[str, Any]]
"""Key and value fields that are the same on every row (the technical fields)."""


@dataclass(frozen=True)
class EncodingRecipe:
    """What rebuilds an :class:`Encoding` in another process (plain, picklable values).

    Attributes:
        key: The key encoder's :attr:`~producer_lib.schema.encoder.AvroEncoder.recipe`.
        value: The value encoder's recipe.
        key_header: Framing header of every key.
        value_header: Framing header of every value.
        partitions: Partitions of the topic.
    """

    key: tuple[str, bool]
    value: tuple[str, bool]
    key_header: bytes
    value_header: bytes
    partitions: int


@dataclass(frozen=True)
class Encoding:
    """How a target's rows are encoded: its encoders, framing headers and partition count."""

    key_encoder: AvroEncoder
    value_encoder: AvroEncoder
    key_header: bytes
    value_header: bytes
    partitions: int

    @property
    def recipe(self) -> EncodingRecipe:
        """What rebuilds this encoding elsewhere (:meth:`from_recipe`)."""
        return EncodingRecipe(
            self.key_encoder.recipe,
            self.value_encoder.recipe,
            self.key_header,
            self.value_header,
            self.partitions,
        )

    @classmethod
    def from_recipe(cls, recipe: EncodingRecipe) -> Encoding:
        """An encoding like the one whose :attr:`recipe` this is (truncation counts at 0)."""
        return cls(
            AvroEncoder.from_recipe(recipe.key),
            AvroEncoder.from_recipe(recipe.value),
            recipe.key_header,
            recipe.value_header,
            recipe.partitions,
        )


@dataclass(frozen=True)
class Layout:
    """Where a batch's rows go: rows per partition, and the rows that get a delivery report.

    Attributes:
        rows_per_partition: Rows per partition (only partitions with rows).
        marks: Rows that are the first or last of their partition, ascending.
    """

    rows_per_partition: dict[int, int]
    marks: list[int]


@dataclass(frozen=True)
class EncodedBuffers:
    """One encoded batch as numpy buffers: ``(bytes, offsets)`` of keys and values.

    Attributes:
        keys: Every key's bytes, concatenated (uint8).
        key_offsets: ``rows + 1`` offsets into ``keys`` (int64).
        values: Every value's bytes, concatenated (uint8).
        value_offsets: ``rows + 1`` offsets into ``values`` (int64).
        partitions: Partition of each row (int64).
        partition_count: Partitions of the topic.
    """

    keys: np.ndarray
    key_offsets: np.ndarray
    values: np.ndarray
    value_offsets: np.ndarray
    partitions: np.ndarray
    partition_count: int

    def layout(self) -> Layout:
        """Rows per partition and the marked rows (one pass each over ``partitions``)."""
        counts = np.bincount(self.partitions, minlength=self.partition_count).tolist()
        return Layout({p: n for p, n in enumerate(counts) if n}, marked_rows(self.partitions))


def encode_batch(
    encoding: Encoding,
    rows: pa.RecordBatch | pa.Table,
    constants: Constants,
    partition: int | None,
    *,
    key_rows: pa.RecordBatch | pa.Table | None = None,
) -> EncodedBuffers:
    """Encode and frame the keys and values of ``rows`` and pick each row's partition.

    Args:
        encoding: The target's encoders and headers.
        rows: The rows (the key columns are read from them too).
        constants: Key and value constants (technical fields).
        partition: Explicit partition of every row, or None for murmur2 of the framed key.
        key_rows: The rows' keys, where they come apart from ``rows`` (a hand-made row).

    Raises:
        EncodeError: A value does not fit the schema.
    """
    keys = encoding.key_encoder.encode_buffer(
        rows if key_rows is None else key_rows, constants[0], encoding.key_header
    )
    values = encoding.value_encoder.encode_buffer(rows, constants[1], encoding.value_header)
    if partition is None:
        parts = partitions_for_keys(keys[0], keys[1], encoding.partitions)
    else:
        parts = np.full(rows.num_rows, partition, dtype=np.int64)
    return EncodedBuffers(
        keys[0],
        keys[1].astype(np.int64, copy=False),
        values[0],
        values[1].astype(np.int64, copy=False),
        parts.astype(np.int64, copy=False),
        encoding.partitions,
    )


def marked_rows(partitions: np.ndarray) -> list[int]:
    """Rows that are the first or the last of their partition, ascending (one pass each)."""
    rows = len(partitions)
    if rows == 0:
        return []
    index = np.arange(rows)
    first = np.full(int(partitions.max()) + 1, rows)
    np.minimum.at(first, partitions, index)
    last = np.full(len(first), -1)
    np.maximum.at(last, partitions, index)
    return sorted({*first[first < rows].tolist(), *last[last >= 0].tolist()})
