"""Avro bodies of one writer schema decoded into Arrow columns by DuckDB's Avro reader.

fastavro decodes one record at a time into Python objects: 100,000 lineitem rows take about
1.8 s, and the driver's path for a table's batch
(:mod:`lakehouse_writer.route.driver_tables`) spent most of its time there
(``docs/PERFORMANCE.md``). DuckDB's ``avro`` extension (the offline wheel ``duckdb-extension-avro``)
decodes an Avro object container file straight into columns, about six times faster.
:class:`ArrowDecoder` wraps the bodies of Kafka messages (without their single-object header) into
such a file, built by Arrow, and reads it:

- Each body is a block of its own, between sync markers, so a body that is short or too long
  cannot shift its neighbours. DuckDB stops at a body it cannot read without an error; the
  decoder counts the rows it got and refuses the lot when one is missing.
- Only schemas whose every field has a type :func:`_field_plan` knows are decoded here (the
  caller falls back to fastavro for the others), and DuckDB's result must have exactly the
  Arrow types expected for them. The container's schema keeps only the logical types DuckDB
  reads (it refuses the producer's own, such as ``BYTE``); the binary layout is the same.
- Decimals (Avro ``bytes``, big-endian two's complement) become ``decimal128`` and
  ``timestamp-*`` instants become UTC timestamps; the rest is what DuckDB gives.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

log = logging.getLogger(__name__)

_MAGIC = b"Obj\x01"
_DECIMAL_BYTES = 16  # decimal128: precision up to 38


class DecodeError(Exception):
    """The bodies do not decode as the schema says (the message says how)."""


class ArrowDecoder:
    """Decodes the Avro bodies of one writer schema into an Arrow table (see the module).

    Safe to use from several threads: each decode runs on its own DuckDB cursor and file.
    :attr:`available` is False when the ``duckdb-extension-avro`` package is missing.
    """

    def __init__(self) -> None:
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        self._tried = False
        self._plans: dict[str, _Plan | None] = {}

    @property
    def available(self) -> bool:
        """True when DuckDB's Avro extension is installed."""
        return self._connection() is not None

    def decodes(self, schema_json: str) -> bool:
        """True when every field of the record schema ``schema_json`` is decoded here."""
        return self.available and self._plan(schema_json) is not None

    def decode(self, schema_json: str, bodies: Sequence[bytes] | pa.Array) -> pa.Table:
        """``bodies`` (Avro binary, no header; no nulls) as a table in the schema's field names.

        Raises:
            DecodeError: A body does not decode, or DuckDB gave another type than expected.
            ValueError: The schema is not one :meth:`decodes` takes.
        """
        plan, con = self._plan(schema_json), self._connection()
        if plan is None or con is None:
            raise ValueError("schema not decoded by DuckDB's Avro reader")
        if not len(bodies):
            return pa.table(
                {name: pa.array([], final or raw) for name, (raw, final) in plan.types.items()}
            )
        if not isinstance(bodies, pa.Array):
            bodies = pa.array(bodies, pa.large_binary())
        fd, path = tempfile.mkstemp(suffix=".avro")
        try:
            with os.fdopen(fd, "wb") as out:
                _write_container(out, plan.container_schema, bodies)
            cursor = con.cursor()
            try:
                path_sql = path.replace("'", "''")
                table = cursor.execute(f"SELECT * FROM read_avro('{path_sql}')").to_arrow_table()
            except Exception as exc:  # duckdb.Error: the bytes are not the schema's
                raise DecodeError(f"DuckDB's Avro reader failed: {exc}") from exc
            finally:
                cursor.close()
        finally:
            os.unlink(path)
        if table.num_rows != len(bodies):
            missing = len(bodies) - table.num_rows
            raise DecodeError(f"{missing} of {len(bodies)} bodies do not decode")
        return _converted(table, plan.types)

    def _plan(self, schema_json: str) -> _Plan | None:
        with self._lock:
            if schema_json not in self._plans:
                self._plans[schema_json] = _plan(json.loads(schema_json))
            return self._plans[schema_json]

    def _connection(self) -> duckdb.DuckDBPyConnection | None:
        with self._lock:
            if not self._tried:
                self._tried = True
                self._con = _open()
            return self._con


def _open() -> duckdb.DuckDBPyConnection | None:
    import duckdb

    from producer_lib.errors import SourceError
    from producer_lib.staging import load_packaged_extension

    con = duckdb.connect(config={"threads": "1"})
    try:
        load_packaged_extension(con, "avro")
    except SourceError as exc:
        log.warning("decoding small tables with fastavro: %s", exc)
        con.close()
        return None
    return con


@dataclass(frozen=True)
class _Plan:
    """How a record schema is decoded here.

    Attributes:
        container_schema: The schema written into the container: the record's binary layout,
            with only the logical types DuckDB reads (date, timestamp-*).
        types: Field name -> (the Arrow type DuckDB gives, the type it becomes; None: kept).
    """

    container_schema: str
    types: dict[str, tuple[pa.DataType, pa.DataType | None]]


def _plan(schema: Any) -> _Plan | None:
    """The plan for the record schema ``schema``; None when a field is not decoded here."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    types, fields = {}, []
    for field in schema.get("fields", []):
        ftype, nullable = field["type"], False
        if isinstance(ftype, list):  # ["null", T]: the only unions a writer schema holds
            if len(ftype) != 2 or "null" not in ftype:
                return None
            ftype, nullable = next(t for t in ftype if t != "null"), True
        planned = _field_plan(ftype)
        if planned is None:
            return None
        neutral, raw, final = planned
        types[field["name"]] = (raw, final)
        fields.append({"name": field["name"], "type": ["null", neutral] if nullable else neutral})
    container = {"type": "record", "name": schema.get("name", "record"), "fields": fields}
    return _Plan(json.dumps(container), types)


def _field_plan(avro: Any) -> tuple[Any, pa.DataType, pa.DataType | None] | None:
    """(the type written in the container, DuckDB's Arrow type, the type it is converted to)."""
    if isinstance(avro, str):
        avro = {"type": avro}
    if not isinstance(avro, dict):
        return None
    base, logical = avro.get("type"), avro.get("logicalType")
    if base == "map":
        values = avro.get("values")
        if values == "string" or (isinstance(values, list) and set(values) == {"null", "string"}):
            return {"type": "map", "values": values}, pa.map_(pa.string(), pa.string()), None
        return None
    if base == "bytes" and logical == "decimal":
        precision, scale = avro.get("precision"), avro.get("scale", 0)
        if not isinstance(precision, int) or not 0 < precision <= 38:
            return None
        return "bytes", pa.binary(), pa.decimal128(precision, scale)
    if base == "int" and logical == "date":
        return {"type": "int", "logicalType": "date"}, pa.date32(), None
    if base == "long" and logical in ("timestamp-micros", "timestamp-millis"):
        # DuckDB gives both in microseconds, without a zone: they are UTC instants
        return {"type": "long", "logicalType": logical}, _NAIVE_US, pa.timestamp("us", "UTC")
    if base in _PLAIN and (logical is None or logical in _PLAIN_LOGICAL.get(base, ())):
        return base, _PLAIN[base], None
    return None


_NAIVE_US = pa.timestamp("us")
_PLAIN = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
# The producer's own logical types: annotations on the base type, decoded as it.
_PLAIN_LOGICAL = {
    "int": ("BYTE", "SHORT"),
    "string": ("VARCHAR", "NVARCHAR", "CLOB", "NCLOB", "URI", "ST_GEOMETRY", "ST_POINT"),
}


def _write_container(out: BinaryIO, schema_json: str, bodies: pa.Array) -> None:
    """Write an Avro object container file with one block per body (codec null).

    Built by Arrow, not a Python loop over the bodies: each block (a count of 1, the body's
    length, the body, the sync marker) is one element of a binary column whose data buffer
    is then the file's blocks, in order.
    """
    sync = os.urandom(16)
    meta = {b"avro.schema": schema_json.encode(), b"avro.codec": b"null"}
    parts = [_MAGIC, _long(len(meta))]
    for key, value in meta.items():
        parts += (_long(len(key)), key, _long(len(value)), value)
    parts += (_long(0), sync)
    bodies = bodies.cast(pa.large_binary())
    lengths = pc.binary_length(bodies).to_numpy(zero_copy_only=False)
    one, marker, joined_by = (pa.scalar(b, pa.large_binary()) for b in (_long(1), sync, b""))
    blocks = pc.binary_join_element_wise(one, _varints(lengths), bodies, marker, joined_by)
    offsets = np.frombuffer(blocks.buffers()[1], np.int64, len(blocks) + 1, blocks.offset * 8)
    data = blocks.buffers()[2]
    assert data is not None
    out.write(b"".join(parts))
    out.write(data[int(offsets[0]) : int(offsets[-1])])


def _long(n: int) -> bytes:
    """Avro's zig-zag varint of ``n``."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varints(values: np.ndarray) -> pa.Array:
    """Avro's zig-zag varints of the non-negative ``values``, as a large binary column."""
    zigzag = values.astype(np.uint64) << np.uint64(1)
    shifts = np.arange(0, 70, 7, dtype=np.uint64)  # ten 7-bit groups hold 64 bits
    groups = ((zigzag[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    sizes = 1 + (zigzag[:, None] >= (np.uint64(1) << shifts[None, 1:])).sum(axis=1)
    used = np.arange(len(shifts))[None, :] < sizes[:, None]
    more = np.arange(len(shifts))[None, :] < (sizes - 1)[:, None]
    data = (groups | np.where(more, 0x80, 0).astype(np.uint8))[used]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return pa.Array.from_buffers(
        pa.large_binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _converted(
    table: pa.Table, expected: dict[str, tuple[pa.DataType, pa.DataType | None]]
) -> pa.Table:
    if table.column_names != list(expected):
        raise DecodeError(f"DuckDB gave the columns {table.column_names}, not {list(expected)}")
    columns = []
    for name, (raw, final) in expected.items():
        column = table.column(name)
        if column.type != raw:
            raise DecodeError(f"DuckDB gave {name} as {column.type}, not {raw}")
        if final is not None and pa.types.is_decimal(final):
            column = pa.chunked_array(
                [_decimals(chunk, final) for chunk in column.chunks], type=final
            )
        elif final is not None:
            column = column.cast(final)
        columns.append(column)
    return pa.table(columns, names=list(expected))


def _decimals(array: pa.Array, dtype: pa.DataType) -> pa.Array:
    """Big-endian two's complement bytes (Avro's decimal) as ``decimal128`` values.

    Raises:
        DecodeError: A value longer than 16 bytes, or with more digits than ``dtype`` holds.
    """
    n = len(array)
    validity, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, n + 1, array.offset * 4)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0)
    lengths = np.diff(offsets)
    if n and int(lengths.max()) > _DECIMAL_BYTES:
        raise DecodeError(f"a decimal of {int(lengths.max())} bytes (16 at most)")
    if not len(data):
        data = np.zeros(1, np.uint8)
    position = np.arange(_DECIMAL_BYTES)
    pad = (_DECIMAL_BYTES - lengths)[:, None]
    source = np.clip(offsets[:-1, None] + position[None, :] - pad, 0, len(data) - 1)
    first = data[np.clip(offsets[:-1], 0, len(data) - 1)]
    sign = np.where((lengths > 0) & (first >= 0x80), 0xFF, 0).astype(np.uint8)
    big_endian = np.where(position[None, :] >= pad, data[source], sign[:, None]).astype(np.uint8)
    little_endian = np.ascontiguousarray(big_endian[:, ::-1])
    wide = pa.Array.from_buffers(
        pa.decimal128(38, dtype.scale), n, [validity, pa.py_buffer(little_endian.tobytes())]
    )
    try:
        return pc.cast(wide, dtype)  # safe: refuses a value with too many digits
    except pa.ArrowInvalid as exc:
        raise DecodeError(f"a decimal does not fit {dtype}: {exc}") from exc
