"""Java-compatible key partitioning (murmur2), vectorised over an encoded key buffer.

The producer picks each message's partition itself, so that it knows, without a Python
callback per message, which message is the first and the last of every partition (the
offsets the ``_commits`` record reports). The hash is Kafka's Java default partitioner for
keyed records: ``(murmur2(key_bytes) & 0x7FFFFFFF) % partitions`` over the complete key
bytes as sent (framing header included), the same as librdkafka's ``murmur2_random``
partitioner for non-empty keys. Java consumers and producers therefore agree on where a key
lives.
"""

from __future__ import annotations

import numpy as np

__all__ = ["murmur2", "partitions_for_keys"]

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)
_POSITIVE = np.uint32(0x7FFFFFFF)


def murmur2(buf: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Kafka's murmur2 of every row of a contiguous buffer.

    Args:
        buf: uint8 bytes of all rows.
        offsets: int64 offsets, ``len(rows) + 1``; row ``i`` is ``buf[offsets[i]:offsets[i+1]]``.

    Returns:
        uint32 hash per row (Java's ``int`` bits).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    out = np.empty(len(lengths), dtype=np.uint32)
    for length in np.unique(lengths):
        rows = np.nonzero(lengths == length)[0]
        matrix = buf[starts[rows, None] + np.arange(int(length))[None, :]]
        out[rows] = _murmur2_fixed(matrix.astype(np.uint32), int(length))
    return out


def _murmur2_fixed(data: np.ndarray, length: int) -> np.ndarray:
    """murmur2 of rows of equal ``length`` (a 2-D uint32 array of byte values)."""
    with np.errstate(over="ignore"):
        h = np.full(data.shape[0], _SEED ^ np.uint32(length), dtype=np.uint32)
        whole = length // 4 * 4
        for i in range(0, whole, 4):
            k = data[:, i] | (data[:, i + 1] << 8) | (data[:, i + 2] << 16) | (data[:, i + 3] << 24)
            k = k * _M
            k ^= k >> 24
            k = k * _M
            h = h * _M
            h ^= k
        tail = length - whole
        if tail >= 3:
            h ^= data[:, whole + 2] << 16
        if tail >= 2:
            h ^= data[:, whole + 1] << 8
        if tail >= 1:
            h ^= data[:, whole]
            h = h * _M
        h ^= h >> 13
        h = h * _M
        h ^= h >> 15
    return h


def partitions_for_keys(buf: np.ndarray, offsets: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of every key, as Kafka's Java default partitioner picks it.

    Args:
        buf: uint8 bytes of all keys (header included).
        offsets: int64 row offsets into ``buf``.
        partitions: Partitions of the topic.

    Returns:
        int64 partition per row.
    """
    if partitions == 1:
        return np.zeros(len(offsets) - 1, dtype=np.int64)
    hashes = murmur2(buf, offsets) & _POSITIVE
    return (hashes % np.uint32(partitions)).astype(np.int64)
