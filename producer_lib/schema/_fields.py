"""Per-field plans of the Avro encoder: where a field's bytes come from and how.

A :class:`FieldPlan` is made once per schema field. For each batch it yields the field's
byte pieces from a constant, from the nullable default of an absent column, from the
fast column encoder, or from fastavro row by row (a one-field record schema that shares
the parsed schema's named types, so fastavro writes exactly the field's bytes). Values that
go through fastavro (rows of the per-row path, constants) first pass the field's guard
(``_rules``): the same rules the column encoders check, in the same words.
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
from producer_lib.schema._rules import (
    TEXT_TYPES,
    Guard,
    Refused,
    Tally,
    build_guard,
    not_unicode,
    not_utf8,
)

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
        guard: Checks (and, if opted in, truncates) a Python value before fastavro writes
            it; None when the type has no rule to check.
    """

    name: str
    source: str
    nullable: bool
    union: tuple[int, int] | None
    spec: dict[str, Any] | None
    fast: ColumnEncoder | None
    writer_schema: dict[str, Any]
    guard: Guard | None = None

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
            truncations: Truncated text values per column, updated in place.

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
                f"cannot encode {_shown_value(value)} for field {self.name!r}: {_why(exc)}",
                field=self.name,
                column=self.source,
            ) from exc
        return out.getvalue()

    def _constant(self, value: Any, rows: int, truncations: dict[str, int]) -> Any:
        """Apply the field's rules to a constant; a truncation counts once per row."""
        if self.guard is None:
            return value
        tally = Tally()
        try:
            value = self.guard(value, tally)
        except Refused as exc:
            raise EncodeError(
                f"constant: {exc.message}", field=self.name, column=self.source
            ) from None
        if tally.truncated:
            truncations[self.source] = truncations.get(self.source, 0) + tally.truncated * rows
        return value

    def _per_row(self, col: Column) -> Piece:
        """Encode the column row by row with fastavro."""
        out = io.BytesIO()
        lengths: list[int] = []
        write, schema, name = fastavro.schemaless_writer, self.writer_schema, self.name
        start = 0
        convert, guard, tally = _avro_value_converter(col.arr.type), self.guard, Tally()
        for row, value in enumerate(_python_values(col)):
            if convert is not None:
                value = convert(value)
            if guard is not None:
                try:
                    value = guard(value, tally)
                except Refused as exc:
                    raise col.error(exc.message, row) from None
            try:
                write(out, schema, {name: value})
            except Exception as exc:
                raise col.error(f"cannot encode {_shown_value(value)}: {_why(exc)}", row) from exc
            end = out.tell()
            lengths.append(end - start)
            start = end
        if tally.truncated:
            col.truncations[col.source] = col.truncations.get(col.source, 0) + tally.truncated
        data = np.frombuffer(out.getbuffer(), dtype=np.uint8).copy()
        return ArrowPiece(from_parts(data, np.array(lengths, dtype=np.int64)))


def _python_values(col: Column) -> list[Any]:
    """The column as Python values; text that is not UTF-8 is an error naming its row."""
    try:
        return col.arr.to_pylist()
    except UnicodeDecodeError:
        pass
    for row in range(len(col.arr)):
        try:
            col.arr[row].as_py()
        except UnicodeDecodeError as exc:
            raise col.error(not_utf8(exc.object), row) from exc
    raise col.error("text is not valid UTF-8")  # only the whole column fails: not seen


def _why(exc: Exception) -> str:
    """What fastavro's exception means; a lone surrogate is said in plain words."""
    return not_unicode(exc) if isinstance(exc, UnicodeEncodeError) else str(exc)


def _shown_value(value: Any) -> str:
    """A value's repr, cut to a readable length (a value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _avro_value_converter(arrow_type: pa.DataType) -> Any:
    """A function turning ``to_pylist()`` values into what fastavro takes, or None if same.

    Arrow gives a map as a list of (key, value) pairs; Avro wants a dict. Nested maps inside
    lists and structs are converted too.
    """
    if pa.types.is_map(arrow_type):
        item = _avro_value_converter(arrow_type.item_type)
        return lambda v: None if v is None else {k: (item(x) if item else x) for k, x in v}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = _avro_value_converter(arrow_type.value_type)
        return None if inner is None else (lambda v: None if v is None else [inner(x) for x in v])
    if pa.types.is_struct(arrow_type):
        fields = {f.name: _avro_value_converter(f.type) for f in arrow_type}
        if not any(fields.values()):
            return None
        return lambda v: (
            None if v is None else {k: (fields[k](x) if fields.get(k) else x) for k, x in v.items()}
        )
    return None


def plan_fields(schema: dict[str, Any], truncate_text: bool = False) -> list[FieldPlan]:
    """Plan every field of a record schema.

    Args:
        schema: An Avro record schema as a JSON dict.
        truncate_text: Truncate over-length VARCHAR/NVARCHAR text of every field (counted)
            instead of refusing it; a type with ``"truncate": true`` truncates regardless.

    Raises:
        SchemaError: fastavro rejects the schema.
    """
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:
        raise SchemaError(f"invalid Avro schema: {exc}", schema=schema.get("name")) from exc
    if not isinstance(parsed, dict):  # a record schema parses to a record
        raise SchemaError("invalid Avro schema: not a record", schema=schema.get("name"))
    return [
        _plan(field, {**parsed, "fields": [parsed_field]}, truncate_text)
        for field, parsed_field in zip(schema["fields"], parsed["fields"], strict=True)
    ]


def _plan(field: dict[str, Any], writer_schema: dict[str, Any], truncate_text: bool) -> FieldPlan:
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
    if spec is not None and truncate_text and spec.get("logicalType") in TEXT_TYPES:
        spec = {**spec, "truncate": True}
    return FieldPlan(
        name=field["name"],
        source=field.get("sourceName", field["name"]),
        nullable=nullable,
        union=union,
        spec=spec,
        fast=lookup(spec) if spec is not None else None,
        writer_schema=writer_schema,
        guard=build_guard(field["type"], truncate_text),
    )


def _primitive_spec(ftype: Any) -> dict[str, Any] | None:
    if isinstance(ftype, str) and ftype in _PRIMITIVES:
        return {"type": ftype}
    if isinstance(ftype, dict) and ftype.get("type") in _PRIMITIVES:
        return ftype
    return None
