"""Column encoders of the Avro date, time and timestamp logical types.

Arrow keeps these as integers since the epoch (or midnight) in some unit; Avro wants
them in another. Coarsening floors, as fastavro's conversion of Python datetimes does
(``int(microseconds / 1000)`` on a non-negative remainder): -1 µs is -1 ms. Timestamps
with a time zone are UTC instants already; naive ones are taken as UTC. An integer
column passes through unchanged, as fastavro passes ints through.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from producer_lib.schema._pieces import Piece, long_piece
from producer_lib.schema._values import Column, NotFast, int_piece

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_MS_PER_DAY = 86_400_000


def _rescale(values: np.ndarray, per_second: int, target: int) -> np.ndarray:
    """Convert int64 counts from one unit to another, flooring when coarsening."""
    if per_second == target:
        return values
    if per_second > target:
        return np.floor_divide(values, per_second // target)
    return values * (target // per_second)


def _counts(col: Column) -> tuple[np.ndarray, int]:
    """Raw int64 counts of a time/timestamp column (nulls as 0) and their unit per second."""
    typ = col.arr.type
    if pa.types.is_time32(typ):
        return col.clean(col.values(np.int32).astype(np.int64)), _PER_SECOND[typ.unit]
    if pa.types.is_time64(typ) or pa.types.is_timestamp(typ):
        return col.clean(col.values(np.int64)), _PER_SECOND[typ.unit]
    raise NotFast


def _encode_date(col: Column) -> list[Piece]:
    typ = col.arr.type
    if pa.types.is_integer(typ):
        return int_piece(col, 32)
    if pa.types.is_date32(typ):
        days = col.values(np.int32).astype(np.int64)
    elif pa.types.is_date64(typ):
        days = np.floor_divide(col.values(np.int64), _MS_PER_DAY)
    else:
        raise NotFast
    return [long_piece(col.clean(days))]


def _time_encoder(target: int, bits: int) -> Callable[[Column], list[Piece]]:
    def encode(col: Column) -> list[Piece]:
        typ = col.arr.type
        if pa.types.is_integer(typ):
            return int_piece(col, bits)
        if not (pa.types.is_time32(typ) or pa.types.is_time64(typ)):
            raise NotFast
        counts, per_second = _counts(col)
        return [long_piece(_rescale(counts, per_second, target))]

    return encode


def _timestamp_encoder(target: int) -> Callable[[Column], list[Piece]]:
    def encode(col: Column) -> list[Piece]:
        typ = col.arr.type
        if pa.types.is_integer(typ):
            return int_piece(col, 64)
        if not pa.types.is_timestamp(typ):
            raise NotFast
        counts, per_second = _counts(col)
        return [long_piece(_rescale(counts, per_second, target))]

    return encode


TEMPORAL_ENCODERS: dict[tuple[str, str | None], Callable[[Column], list[Piece]]] = {
    ("int", "date"): _encode_date,
    ("int", "time-millis"): _time_encoder(_PER_SECOND["ms"], 32),
    ("long", "time-micros"): _time_encoder(_PER_SECOND["us"], 64),
    ("long", "timestamp-millis"): _timestamp_encoder(_PER_SECOND["ms"]),
    ("long", "timestamp-micros"): _timestamp_encoder(_PER_SECOND["us"]),
}
