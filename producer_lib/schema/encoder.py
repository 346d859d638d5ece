"""Arrow → Avro binary encoder, column at a time, byte-identical to fastavro.

Quickstart::

    enc = AvroEncoder(schema)                      # an Avro record schema as a JSON dict
    values = enc.encode(batch, constants={"__change_type": "R"})   # list[bytes], one per row
    buf, offsets = enc.encode_buffer(batch, header=confluent_header(42))
    row_i = buf[offsets[i] : offsets[i + 1]]       # zero-copy form: numpy uint8 + int64 offsets
    enc.truncations                                # {"COLUMN": n} text cut to length (opt-in)
    enc.take_truncations()                         # the same, since the last take

Each row's bytes equal ``fastavro.schemaless_writer(fo, schema, row)`` for the row dict
that ``batch.to_pylist()`` gives (constants merged in, opted-in text truncated).

Fields and columns:

- A field reads the batch column ``field.get("sourceName", field["name"])``.
- A field named in ``constants`` takes that value on every row; it is encoded once by
  fastavro and its bytes repeated.
- A field with neither column nor constant is null on every row when its type is a
  union with ``"null"``; otherwise :class:`~producer_lib.errors.EncodeError`.

Fast path (numpy / pyarrow.compute over whole columns, no per-row Python): boolean,
int, long, float, double, string, bytes, decimal (bytes), date, time-millis,
time-micros, timestamp-millis, timestamp-micros, uuid (string), the logical types
fastavro does not know (VARCHAR, NVARCHAR, CLOB, URI, ST_GEOMETRY, BYTE, SHORT, ...) as
their base type, and each of these in a union with ``"null"`` (either order). Anything
else (arrays, maps, records, enums, fixed, other unions, unusual Arrow input types)
is encoded per row by fastavro and stitched in.

Value rules, the same on the column path and the per-row path (and for constants): a null
in a non-nullable field, an ``int`` outside 32 bits, a decimal beyond its precision (or with
a finer Arrow scale than the schema's), a finite ``float`` beyond float32's range (it would
become inf; nan and inf themselves pass), a ``VARCHAR`` value that is not ASCII, text that is
not valid Unicode (a lone surrogate) and ``VARCHAR``/``NVARCHAR`` text longer than ``length``
raise EncodeError naming the table (``table``: the schema's ``namespace.name``), the field,
the column, the row (its index in the batch) and, when the schema lists ``primaryKeys``
found in the batch, the row's key (``key``). No value is altered silently.

Truncation is opt-in: a type with ``"truncate": true`` (``AvroNVarchar(n, truncate=True)``),
a record with ``"truncateText": true`` (``ValueSchema.truncate_text = True``) or
``AvroEncoder(schema, truncate_text=True)`` cuts longer text to ``length`` characters
instead. Every cut value is counted per column (original column name) in
:attr:`AvroEncoder.truncations` (since the encoder was made) and
:meth:`AvroEncoder.take_truncations` (since the last take); a batch that fails counts nothing.

Input conversions: naive timestamps are UTC (fastavro would use the local zone; they
agree on a UTC machine); coarsening a time unit floors; integer and float columns feed
decimals (floats rounded half-to-even at the scale); 16-byte binary feeds uuid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from producer_lib.errors import EncodeError, SchemaError
from producer_lib.schema._fields import FieldPlan, plan_fields
from producer_lib.schema._pieces import ConstPiece, Piece, assemble, to_numpy_parts

_SHOWN_KEY = 100  # characters of a key value shown in an error

__all__ = ["AvroEncoder"]


class AvroEncoder:
    """Encode Arrow record batches to Avro binary rows for one record schema.

    Args:
        schema: An Avro record schema as a JSON dict (as ``json.loads`` gives).
        truncate_text: Opt in to truncating over-length VARCHAR/NVARCHAR text of every
            field (counted) instead of refusing it; the schema's own ``"truncateText": true``
            does the same.

    Raises:
        SchemaError: The schema is not a valid Avro record schema.
    """

    def __init__(self, schema: dict[str, Any], truncate_text: bool = False) -> None:
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise SchemaError("AvroEncoder needs an Avro record schema (a dict)")
        self._recipe = (json.dumps(schema), truncate_text)
        truncate_text = truncate_text or schema.get("truncateText") is True
        self._fields: list[FieldPlan] = plan_fields(schema, truncate_text)
        self._table = _table_name(schema)
        keys = schema.get("primaryKeys")
        self._keys: tuple[str, ...] = tuple(keys) if isinstance(keys, list) else ()
        self._truncations: dict[str, int] = {}
        self._taken: dict[str, int] = {}

    @property
    def recipe(self) -> tuple[str, bool]:
        """What rebuilds this encoder elsewhere (another process): :meth:`from_recipe`."""
        return self._recipe

    @classmethod
    def from_recipe(cls, recipe: tuple[str, bool]) -> AvroEncoder:
        """An encoder like the one whose :attr:`recipe` this is (truncation counts start at 0)."""
        schema_text, truncate_text = recipe
        return cls(json.loads(schema_text), truncate_text)

    def add_truncations(self, counts: Mapping[str, int]) -> None:
        """Count truncations made by a copy of this encoder (another process) as its own."""
        for column, count in counts.items():
            self._truncations[column] = self._truncations.get(column, 0) + count

    @property
    def truncations(self) -> dict[str, int]:
        """Text values truncated since the encoder was made, per column (original name).

        Only columns with at least one truncation appear; empty unless truncation was opted
        in. Rows of a batch that raised are not counted.
        """
        return dict(self._truncations)

    def take_truncations(self) -> dict[str, int]:
        """Text values truncated since the last call (or since the encoder was made).

        Returns:
            Counts per column (original name), only columns with a truncation; e.g. read
            once per transaction for its commit record.
        """
        taken = {
            column: count - self._taken.get(column, 0)
            for column, count in self._truncations.items()
            if count > self._taken.get(column, 0)
        }
        self._taken = dict(self._truncations)
        return taken

    def encode(
        self,
        batch: pa.RecordBatch | pa.Table,
        constants: Mapping[str, Any] | None = None,
        header: bytes = b"",
    ) -> list[bytes]:
        """Encode every row of a batch.

        Args:
            batch: The rows; columns are matched to fields by name.
            constants: Values of fields that are the same on every row, by field name.
            header: Bytes put before every row (e.g. a Confluent or single-object header).

        Returns:
            One ``bytes`` per row, in row order.

        Raises:
            EncodeError: A value breaks a rule of its field, or a required field is missing.
        """
        return self._encode_arrow(batch, constants, header).to_pylist()

    def encode_buffer(
        self,
        batch: pa.RecordBatch | pa.Table,
        constants: Mapping[str, Any] | None = None,
        header: bytes = b"",
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode every row of a batch into one contiguous buffer.

        Args:
            batch: The rows; columns are matched to fields by name.
            constants: Values of fields that are the same on every row, by field name.
            header: Bytes put before every row.

        Returns:
            ``(buf, offsets)``: uint8 bytes of all rows and int64 offsets (``len(batch)+1``);
            row ``i`` is ``buf[offsets[i]:offsets[i + 1]]``. ``buf`` may be read-only.

        Raises:
            EncodeError: A value breaks a rule of its field, or a required field is missing.
        """
        return to_numpy_parts(self._encode_arrow(batch, constants, header))

    def _encode_arrow(
        self,
        batch: pa.RecordBatch | pa.Table,
        constants: Mapping[str, Any] | None,
        header: bytes,
    ) -> pa.Array:
        columns = _columns_by_name(batch, {plan.source for plan in self._fields})
        constants = constants or {}
        unknown = set(constants) - {f.name for f in self._fields}
        if unknown:
            raise EncodeError(f"constants for fields not in the schema: {sorted(unknown)}")
        pieces: list[Piece] = [ConstPiece(bytes(header))] if header else []
        counts: dict[str, int] = {}
        for plan in self._fields:
            try:
                pieces.extend(
                    plan.encode(columns.get(plan.source), constants, batch.num_rows, counts)
                )
            except EncodeError as exc:
                raise self._located(exc, columns) from exc.__cause__
        encoded = assemble(pieces, batch.num_rows)
        for column, count in counts.items():
            self._truncations[column] = self._truncations.get(column, 0) + count
        return encoded

    def _located(self, exc: EncodeError, columns: Mapping[str, pa.Array]) -> EncodeError:
        """The error with the table and, for a row, the row's key added to its context."""
        context = {"table": self._table, **exc.context}
        row = exc.context.get("row")
        if isinstance(row, int) and self._keys and all(k in columns for k in self._keys):
            context["key"] = {k: _shown_key(columns[k][row].as_py()) for k in self._keys}
        return EncodeError(exc.message, **context)


def _table_name(schema: Mapping[str, Any]) -> str:
    """``namespace.name`` of a record schema, with the original (source) names."""
    name = str(schema.get("sourceName") or schema.get("name"))
    namespace = schema.get("sourceNamespace") or schema.get("namespace")
    return f"{namespace}.{name}" if namespace else name


def _shown_key(value: Any) -> Any:
    """A key value for an error message: long text cut to a readable length."""
    if isinstance(value, str) and len(value) > _SHOWN_KEY:
        return value[:_SHOWN_KEY] + "..."
    if isinstance(value, bytes) and len(value) > _SHOWN_KEY:
        return value[:_SHOWN_KEY] + b"..."
    return value


def _columns_by_name(batch: pa.RecordBatch | pa.Table, wanted: set[str]) -> dict[str, pa.Array]:
    """The wanted columns as unchunked arrays by name (a Table's chunks are combined)."""
    if not isinstance(batch, pa.RecordBatch | pa.Table):
        raise EncodeError(f"expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
    out: dict[str, pa.Array] = {}
    for index, name in enumerate(batch.column_names):
        if name in wanted and name not in out:
            column = batch.column(index)
            out[name] = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return out
