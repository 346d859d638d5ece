"""Column encoders: one small function per Avro type, Arrow column in, byte pieces out.

Each encoder takes a :class:`Column` and returns the pieces (see ``_pieces``) of every
row's value bytes; null rows may hold anything, the caller masks them behind the union
branch. An encoder raises :class:`NotFast` when the Arrow type is not one it reads, and
the caller then encodes that column per row with fastavro. :func:`lookup` is the dispatch
from an Avro type (base type + ``logicalType``) to its encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.write import LOGICAL_WRITERS

from producer_lib.schema._pieces import (
    ArrowPiece,
    MatrixPiece,
    Piece,
    varint_piece,
)
from producer_lib.schema._rules import float_overflow, not_ascii, not_utf8, too_long
from producer_lib.schema._temporal import TEMPORAL_ENCODERS
from producer_lib.schema._values import (
    Column,
    NotFast,
    decimal_piece,
    first_bad,
    int64_values,
    int_piece,
    uuid_hex_piece,
)

__all__ = ["Column", "ColumnEncoder", "NotFast", "lookup"]

ColumnEncoder = Callable[[Column], list[Piece]]


def _encode_boolean(col: Column) -> list[Piece]:
    if not pa.types.is_boolean(col.arr.type):
        raise NotFast
    flags = pc.fill_null(col.arr, False).to_numpy(zero_copy_only=False)
    return [MatrixPiece(flags.astype(np.uint8)[:, None])]


def _encode_int(col: Column) -> list[Piece]:
    return int_piece(col, 32)


def _encode_long(col: Column) -> list[Piece]:
    return int_piece(col, 64)


def _float_values(col: Column, dtype: type[np.floating[Any]]) -> np.ndarray:
    """Read a numeric column as ``dtype`` the way ``struct.pack`` sees Python floats."""
    typ = col.arr.type
    if pa.types.is_integer(typ):
        # Python converts int -> double first, then packs: round twice like it does.
        return int64_values(col).astype(np.float64).astype(dtype)
    if not (pa.types.is_float32(typ) or pa.types.is_float64(typ)):
        raise NotFast
    raw = col.values(np.float32 if pa.types.is_float32(typ) else np.float64)
    if raw.dtype == np.float32 and dtype is np.float32:
        # A float32 travels as a Python float (double): signalling NaNs come back quiet.
        bits = raw.view(np.uint32)
        return np.where(np.isnan(raw), bits | np.uint32(0x400000), bits).view(np.float32)
    return raw.astype(dtype, copy=False)


def _encode_float(col: Column) -> list[Piece]:
    if pa.types.is_float32(col.arr.type):
        values = _float_values(col, np.float32)
    else:
        wide = _float_values(col, np.float64)
        with np.errstate(over="ignore"):
            values = wide.astype(np.float32)
        overflow = np.isinf(values) & np.isfinite(wide)
        if col.valid is not None:
            overflow &= col.valid
        if overflow.any():
            row = first_bad(overflow)
            raise col.error(float_overflow(float(wide[row])), row)
    return [MatrixPiece(np.ascontiguousarray(values).view(np.uint8).reshape(-1, 4))]


def _encode_double(col: Column) -> list[Piece]:
    values = _float_values(col, np.float64)
    return [MatrixPiece(np.ascontiguousarray(values).view(np.uint8).reshape(-1, 8))]


def _text_array(col: Column) -> pa.Array:
    """The column as Arrow text, checked to be valid UTF-8.

    Arrow validates text it builds from Python strings or files, but an array built from raw
    buffers may hold any bytes (a lone surrogate encoded as ED A0 80, say); fastavro would
    refuse such a value, so the column path refuses it too, naming the row.
    """
    typ = col.arr.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        arr = col.arr
    elif pa.types.is_string_view(typ):
        arr = col.arr.cast(pa.large_string())
    else:
        raise NotFast
    if not _valid_text(arr):
        row = _first_invalid(arr)
        raise col.error(not_utf8(arr.cast(pa.large_binary())[row].as_py()), row)
    return arr


def _valid_text(arr: pa.Array) -> bool:
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _first_invalid(arr: pa.Array) -> int:
    """The first row of ``arr`` that is not valid UTF-8 (bisecting: a few validations)."""
    low, high = 0, len(arr)
    while high - low > 1:
        middle = (low + high) // 2
        if _valid_text(arr.slice(low, middle - low)):
            low = middle
        else:
            high = middle
    return low


def _length_prefixed(arr: pa.Array) -> list[Piece]:
    """Avro string/bytes: zigzag varint byte length, then the bytes."""
    data = arr.cast(pa.large_binary())
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int64)
    offsets = offsets[data.offset : data.offset + len(data) + 1]
    lengths = np.diff(offsets)
    if data.null_count:
        lengths = np.where(data.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
    return [varint_piece(lengths.astype(np.uint64) << np.uint64(1)), ArrowPiece(data)]


def _encode_string(col: Column) -> list[Piece]:
    return _length_prefixed(_text_array(col))


def _encode_bytes(col: Column) -> list[Piece]:
    typ = col.arr.type
    if not (
        pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
        or pa.types.is_fixed_size_binary(typ)
        or pa.types.is_binary_view(typ)
    ):
        raise NotFast
    return _length_prefixed(col.arr)


def _encode_varchar(col: Column) -> list[Piece]:
    arr = _text_array(col)
    ascii_ok = pc.fill_null(pc.string_is_ascii(arr), True)
    if not pc.all(ascii_ok).as_py():
        row = first_bad(~ascii_ok.to_numpy(zero_copy_only=False))
        raise col.error(not_ascii(col.spec.get("length"), arr[row].as_py()), row)
    return _length_prefixed(_within_length(col, arr, pc.binary_length(arr)))


def _encode_nvarchar(col: Column) -> list[Piece]:
    arr = _text_array(col)
    return _length_prefixed(_within_length(col, arr, pc.utf8_length(arr)))


def _within_length(col: Column, arr: pa.Array, lengths: pa.Array) -> pa.Array:
    """Refuse text longer than the type's ``length``; truncate and count it when opted in."""
    limit = col.spec.get("length")
    if not isinstance(limit, int):
        return arr
    too_long_rows = pc.fill_null(pc.greater(lengths, limit), False)
    count = pc.sum(too_long_rows).as_py() or 0
    if not count:
        return arr
    if not col.spec.get("truncate"):
        row = first_bad(too_long_rows.to_numpy(zero_copy_only=False))
        raise col.error(too_long(str(col.spec.get("logicalType")), limit, arr[row].as_py()), row)
    col.truncations[col.source] = col.truncations.get(col.source, 0) + int(count)
    return pc.utf8_slice_codeunits(arr, 0, limit)


def _encode_uuid(col: Column) -> list[Piece]:
    typ = col.arr.type
    if isinstance(typ, pa.ExtensionType):
        typ = typ.storage_type
    if pa.types.is_fixed_size_binary(typ) and typ.byte_width == 16:
        return [uuid_hex_piece(col)]
    return _encode_string(col)


def _encode_decimal(col: Column) -> list[Piece]:
    return [decimal_piece(col)]


_ENCODERS: dict[tuple[str, str | None], ColumnEncoder] = {
    ("boolean", None): _encode_boolean,
    ("int", None): _encode_int,
    ("long", None): _encode_long,
    ("float", None): _encode_float,
    ("double", None): _encode_double,
    ("string", None): _encode_string,
    ("bytes", None): _encode_bytes,
    ("string", "VARCHAR"): _encode_varchar,
    ("string", "NVARCHAR"): _encode_nvarchar,
    ("string", "uuid"): _encode_uuid,
    ("bytes", "decimal"): _encode_decimal,
    **TEMPORAL_ENCODERS,
}


def lookup(spec: dict[str, Any]) -> ColumnEncoder | None:
    """Find the column encoder of an Avro type.

    Args:
        spec: The type as a dict with a primitive ``type`` and maybe a ``logicalType``.

    Returns:
        The encoder, or None when the type needs fastavro per row (a logical type
        fastavro knows but the fast path does not, or a non-primitive type). A logical
        type fastavro does not know (VARCHAR's siblings CLOB, URI, BYTE, ...) encodes
        as its base type, as fastavro does.
    """
    base = spec.get("type")
    if not isinstance(base, str):
        return None
    logical = spec.get("logicalType")
    if (base, logical) in _ENCODERS:
        return _ENCODERS[(base, logical)]
    if logical is not None and f"{base}-{logical}" in LOGICAL_WRITERS:
        return None
    return _ENCODERS.get((base, None))
