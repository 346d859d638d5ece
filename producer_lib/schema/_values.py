"""Reading Arrow columns as numpy values, and the value encoders that need more than a line.

:class:`Column` carries one Arrow column with its field and error context; the helpers
read its buffers without copying where they can, and build the byte pieces of integers,
decimals and binary UUIDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from producer_lib.errors import EncodeError
from producer_lib.schema._pieces import MatrixPiece, Piece, long_piece

_INT_BOUNDS = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_DASHES = (8, 13, 18, 23)
_UUID_DIGITS = np.array([i for i in range(36) if i not in _DASHES])
_UUID_PREFIX = 72  # zigzag varint of the canonical length 36


class NotFast(Exception):
    """The column's Arrow type is not one the fast path reads: use fastavro per row."""


@dataclass
class Column:
    """One Arrow column on its way into an Avro field.

    Attributes:
        name: Avro field name.
        source: Column name in the batch.
        spec: The field's (non-null) Avro type as a dict with ``type``/``logicalType``.
        arr: The column, not chunked, not dictionary-encoded.
        valid: True for non-null rows; None when no row is null.
        truncations: Truncated text values per column (source name), updated in place.
    """

    name: str
    source: str
    spec: dict[str, Any]
    arr: pa.Array
    valid: np.ndarray | None
    truncations: dict[str, int] = field(default_factory=dict)

    def values(self, dtype: Any = None) -> np.ndarray:
        """View the fixed-width values buffer as numpy (null rows hold anything)."""
        dtype = np.dtype(dtype or self.arr.type.to_pandas_dtype())
        start = self.arr.offset
        buf = self.arr.buffers()[1]
        if buf is None:
            return np.zeros(len(self.arr), dtype)
        return np.frombuffer(buf, dtype=dtype)[start : start + len(self.arr)]

    def clean(self, values: np.ndarray, fill: Any = 0) -> np.ndarray:
        """Replace the values of null rows by ``fill``."""
        return values if self.valid is None else np.where(self.valid, values, fill)

    def error(self, message: str, row: int | None = None) -> EncodeError:
        """Build an EncodeError naming the field, the column and the row."""
        where = f" at row {row}" if row is not None else ""
        return EncodeError(
            f"field {self.name!r} (column {self.source!r}){where}: {message}",
            field=self.name,
            column=self.source,
            row=row,
        )


def first_bad(mask: np.ndarray) -> int:
    """Index of the first True in a boolean array."""
    return int(np.flatnonzero(mask)[0])


def int64_values(col: Column) -> np.ndarray:
    """Read an integer column as int64, nulls as 0.

    Raises:
        NotFast: The column is not an integer column.
        EncodeError: A uint64 value does not fit in int64.
    """
    if not pa.types.is_integer(col.arr.type):
        raise NotFast
    raw = col.values()
    if raw.dtype == np.uint64:
        bad = raw > np.uint64(2**63 - 1)
        if col.valid is not None:
            bad &= col.valid
        if bad.any():
            row = first_bad(bad)
            raise col.error(f"value {int(raw[row])} overflows Avro long (64-bit)", row)
    return col.clean(raw.astype(np.int64, copy=False))


def int_piece(col: Column, bits: int) -> list[Piece]:
    """Encode an integer column as Avro ``int`` (32) or ``long`` (64), range-checked."""
    values = int64_values(col)
    low, high = _INT_BOUNDS[bits]
    if bits < 64:
        bad = (values < low) | (values > high)
        if bad.any():
            row = first_bad(bad)
            raise col.error(f"value {int(values[row])} overflows Avro int (32-bit)", row)
    return [long_piece(values)]


def _decimal128(col: Column, scale: int) -> pa.Array:
    """The column as decimal128(38, scale): the schema's scale, unscaled int128 values."""
    typ = col.arr.type
    precision = col.spec.get("precision")
    if not isinstance(precision, int) or precision > 38:
        raise NotFast  # beyond decimal128 (or malformed): fastavro per row
    target = pa.decimal128(38, scale)
    if pa.types.is_decimal(typ) and typ.scale > scale and col.arr.null_count < len(col.arr):
        row = first_bad(col.arr.is_valid().to_numpy(zero_copy_only=False))
        raise col.error(f"Arrow scale {typ.scale} is finer than the schema's scale {scale}", row)
    if pa.types.is_floating(typ):
        source = pc.round(col.arr, scale)
    elif pa.types.is_decimal(typ) or pa.types.is_integer(typ):
        source = col.arr
    else:
        raise NotFast
    if source.type == target:
        return source
    try:
        return pc.cast(source, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise col.error(f"cannot convert {typ} to decimal(38, {scale}): {exc}") from exc


def _decimal_words(col: Column) -> tuple[np.ndarray, np.ndarray]:
    """Little-endian (lo, hi) uint64 words of the unscaled values, nulls as 0."""
    arr = _decimal128(col, int(col.spec.get("scale", 0)))
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint64)[2 * arr.offset : 2 * (arr.offset + n)]
    words = raw.reshape(n, 2)
    return col.clean(words[:, 0]), col.clean(words[:, 1])


def _check_precision(col: Column, abs_lo: np.ndarray, abs_hi: np.ndarray) -> None:
    precision = int(col.spec["precision"])
    limit_hi, limit_lo = divmod(10**precision, 2**64)
    bad = (abs_hi > np.uint64(limit_hi)) | (
        (abs_hi == np.uint64(limit_hi)) & (abs_lo >= np.uint64(limit_lo))
    )
    if bad.any():
        row = first_bad(bad)
        value = col.arr[row].as_py()
        raise col.error(f"value {value} does not fit decimal precision {precision}", row)


def _longest_bytes(abs_lo: np.ndarray, abs_hi: np.ndarray) -> int:
    """``bit_length(max |v|) // 8`` (at most 15): how far :func:`decimal_piece` must look."""
    if len(abs_lo) == 0:
        return 0
    high = int(abs_hi.max())
    bits = 64 + high.bit_length() if high else int(abs_lo.max()).bit_length()
    return min(15, bits // 8)


def decimal_piece(col: Column) -> Piece:
    """Encode Avro ``bytes``/``decimal`` as fastavro does.

    fastavro writes the unscaled value in big-endian two's complement on
    ``bit_length(|v|) // 8 + 1`` bytes (so -128 takes two bytes, 0 takes one).
    """
    lo, hi = _decimal_words(col)
    neg = hi.view(np.int64) < 0
    abs_lo = np.where(neg, ~lo + np.uint64(1), lo)
    abs_hi = np.where(neg, ~hi + (lo == 0).astype(np.uint64), hi)
    _check_precision(col, abs_lo, abs_hi)
    lengths = np.ones(len(lo), dtype=np.int64)
    for j in range(1, _longest_bytes(abs_lo, abs_hi) + 1):  # no value needs more
        bit = 8 * j - 1
        if bit < 64:
            lengths += (abs_hi > 0) | (abs_lo >= np.uint64(1 << bit))
        else:
            lengths += abs_hi >= np.uint64(1 << (bit - 64))
    width = int(lengths.max()) if len(lengths) else 1
    words = np.stack([lo, hi], axis=1)
    big_endian = words.view(np.uint8).reshape(-1, 16)[:, ::-1][:, 16 - width :]
    mat = np.empty((len(lo), width + 1), dtype=np.uint8)
    mat[:, 0] = lengths * 2
    mat[:, 1:] = big_endian
    mask = np.empty(mat.shape, dtype=bool)
    mask[:, 0] = True
    mask[:, 1:] = np.arange(width) >= (width - lengths)[:, None]
    return MatrixPiece(mat, mask)


def uuid_hex_piece(col: Column) -> Piece:
    """Encode 16-byte binary UUIDs as their canonical 36-character Avro string."""
    arr = col.arr.storage if isinstance(col.arr, pa.ExtensionArray) else col.arr
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[16 * arr.offset : 16 * (arr.offset + n)]
    octets = raw.reshape(n, 16)
    digits = np.stack([_HEX[octets >> 4], _HEX[octets & 15]], axis=2).reshape(n, 32)
    mat = np.empty((n, 37), dtype=np.uint8)
    mat[:, 0] = _UUID_PREFIX
    mat[:, 1 + np.array(_DASHES)] = ord("-")
    mat[:, 1 + _UUID_DIGITS] = digits
    return MatrixPiece(mat)
