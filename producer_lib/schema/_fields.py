"""Per-field plans of the Avro encoder: where a field's bytes come from and how.

A :class:`FieldPlan` is made once per schema field. For each batch it yields the field's
byte pieces from a constant, from the nullable default of an absent column, from the
fast column encoder, or from fastavro row by row (a one-field record schema that shares
the parsed schema's named types, so fastavro writes exactly the field's bytes).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from producer_lib.errors import EncodeError, SchemaError
from producer_lib.schema._columns import Column, ColumnEncoder, NotFast, lookup
from producer_lib.schema._pieces import ArrowPiece, ConstPiece, Piece, from_parts, with_union

_PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "bytes", "string"})


@dataclass(frozen=True)
class FieldPlan:
    """How one record field is encoded.

    Attributes:
        name: Field name.
        source: Batch column it reads (``sourceName`` or the name).
        nullable: The type is ``"null"`` or a union with ``"null"``.
        union: ``(value_branch_byte, null_branch_byte)`` of a ``null``+T union, else None.
        spec: The (non-null) type as a dict with a primitive ``type``, else None.
        fast: The column encoder, or None to encode per row with fastavro.
        writer_schema: A parsed one-field record schema for fastavro.
    """

    name: str
    source: str
    nullable: bool
    union: tuple[int, int] | None
    spec: dict[str, Any] | None
    fast: ColumnEncoder | None
    writer_schema: dict[str, Any]

    def encode(
        self,
        arr: pa.Array | None,
        constants: Mapping[str, Any],
        rows: int,
        truncations: dict[str, int],
    ) -> list[Piece]:
        """The field's pieces for a batch of ``rows`` rows.

        Args:
            arr: The batch column, or None when the batch has none.
            constants: Constant values by field name.
            rows: Rows in the batch.
            truncations: NVARCHAR truncation counter, updated in place.

        Raises:
            EncodeError: A value breaks the field's rules, or a required field is absent.
        """
        if self.name in constants:
            value = self._constant(constants[self.name], rows, truncations)
            return [ConstPiece(self.encode_one(value))]
        if arr is None:
            if not self.nullable:
                raise EncodeError(
                    f"field {self.name!r} is not nullable and the batch has no column "
                    f"{self.source!r}: add the column or pass a constant",
                    field=self.name,
                    column=self.source,
                )
            return [ConstPiece(self.encode_one(None))]
        return self._encode_column(arr, rows, truncations)

    def _encode_column(self, arr: pa.Array, rows: int, truncations: dict[str, int]) -> list[Piece]:
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
        col = Column(self.name, self.source, self.spec or {}, arr, valid, truncations)
        if valid is not None and not self.nullable:
            raise col.error("null in a non-nullable field", int(np.flatnonzero(~valid)[0]))
        if self.nullable and arr.null_count == rows:
            return [ConstPiece(self.encode_one(None))]
        if self.fast is not None:
            try:
                pieces = self.fast(col)
            except NotFast:
                return [self._per_row(col)]
            return with_union(pieces, valid, *self.union) if self.union else pieces
        return [self._per_row(col)]

    def encode_one(self, value: Any) -> bytes:
        """Encode one value of the field with fastavro."""
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self.writer_schema, {self.name: value})
        except Exception as exc:
            raise EncodeError(
                f"cannot encode {value!r} for field {self.name!r}: {exc}", field=self.name
            ) from exc
        return out.getvalue()

    def _constant(self, value: Any, rows: int, truncations: dict[str, int]) -> Any:
        """Apply the VARCHAR/NVARCHAR rules to a constant string."""
        spec = self.spec or {}
        limit = spec.get("length")
        if not isinstance(value, str) or limit is None:
            return value
        if spec.get("logicalType") == "NVARCHAR" and len(value) > limit:
            truncations[self.name] = truncations.get(self.name, 0) + rows
            return value[:limit]
        if spec.get("logicalType") == "VARCHAR" and (not value.isascii() or len(value) > limit):
            raise EncodeError(
                f"constant {value!r} is not ASCII of at most {limit} characters (VARCHAR)",
                field=self.name,
            )
        return value

    def _per_row(self, col: Column) -> Piece:
        """Encode the column row by row with fastavro."""
        out = io.BytesIO()
        lengths: list[int] = []
        write, schema, name = fastavro.schemaless_writer, self.writer_schema, self.name
        start = 0
        convert = _avro_value_converter(col.arr.type)
        for row, value in enumerate(col.arr.to_pylist()):
            if convert is not None:
                value = convert(value)
            try:
                write(out, schema, {name: value})
            except Exception as exc:
                raise col.error(f"cannot encode {value!r}: {exc}", row) from exc
            end = out.tell()
            lengths.append(end - start)
            start = end
        data = np.frombuffer(out.getbuffer(), dtype=np.uint8).copy()
        return ArrowPiece(from_parts(data, np.array(lengths, dtype=np.int64)))


def _avro_value_converter(arrow_type: pa.DataType) -> Any:
    """A function turning ``to_pylist()`` values into what fastavro takes, or None if same.

    Arrow gives a map as a list of (key, value) pairs; Avro wants a dict. Nested maps inside
    lists and structs are converted too.
    """
    if pa.types.is_map(arrow_type):
        item = _avro_value_converter(arrow_type.item_type)
        return lambda v: None if v is None else {
            k: (item(x) if item else x) for k, x in v}  # fmt: skip
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = _avro_value_converter(arrow_type.value_type)
        return None if inner is None else (lambda v: None if v is None else [inner(x) for x in v])
    if pa.types.is_struct(arrow_type):
        fields = {f.name: _avro_value_converter(f.type) for f in arrow_type}
        if not any(fields.values()):
            return None
        return lambda v: None if v is None else {
            k: (fields[k](x) if fields.get(k) else x) for k, x in v.items()}  # fmt: skip
    return None


def plan_fields(schema: dict[str, Any]) -> list[FieldPlan]:
    """Plan every field of a record schema.

    Raises:
        SchemaError: fastavro rejects the schema.
    """
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:
        raise SchemaError(f"invalid Avro schema: {exc}", schema=schema.get("name")) from exc
    return [
        _plan(field, {**parsed, "fields": [parsed_field]})
        for field, parsed_field in zip(schema["fields"], parsed["fields"], strict=True)
    ]


def _plan(field: dict[str, Any], writer_schema: dict[str, Any]) -> FieldPlan:
    ftype = field["type"]
    nullable = ftype == "null" or (isinstance(ftype, list) and "null" in ftype)
    union = None
    if isinstance(ftype, list) and len(ftype) == 2 and "null" in ftype:
        null_index = ftype.index("null")
        union = (2 * (1 - null_index), 2 * null_index)  # zigzag of the branch index
        ftype = ftype[1 - null_index]
    elif isinstance(ftype, list):
        ftype = None
    spec = _primitive_spec(ftype)
    return FieldPlan(
        name=field["name"],
        source=field.get("sourceName", field["name"]),
        nullable=nullable,
        union=union,
        spec=spec,
        fast=lookup(spec) if spec is not None else None,
        writer_schema=writer_schema,
    )


def _primitive_spec(ftype: Any) -> dict[str, Any] | None:
    if isinstance(ftype, str) and ftype in _PRIMITIVES:
        return {"type": ftype}
    if isinstance(ftype, dict) and ftype.get("type") in _PRIMITIVES:
        return ftype
    return None
