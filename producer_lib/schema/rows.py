r"""Python rows to an Arrow table, without altering or losing a value.

Rows a flow builds by hand (``produce_row``: dicts by column name) and pages a reader fetched
(a database cursor's tuples, in column order) become Arrow the same way.
``pa.Table.from_pylist(rows, schema=...)`` has two silent or nameless failures for such
rows: a float32 column turns ``1e300`` into ``inf``,
and a lone surrogate (``"\ud800"``) raises a bare ``UnicodeEncodeError``. :func:`rows_to_arrow`
builds float32 columns as float64, so the encoder refuses what float32 cannot hold (naming
the row) instead of Arrow rounding it to inf, and turns a conversion failure into an
:class:`~producer_lib.errors.EncodeError` naming table, column and row::

    table = rows_to_arrow([row], value_schema.get_pyarrow(), table="LABWARE.SAMPLE_PLAN")
    encoder.encode_buffer(table, constants, header)
    page = rows_to_arrow(cursor.fetchmany(10_000), arrow_schema, table="ORDERS")  # tuples

A float32 column built as float64 and appended to a DuckDB ``FLOAT`` column is narrowed by
DuckDB, which refuses a value out of range rather than store inf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from producer_lib.errors import EncodeError
from producer_lib.schema._rules import not_unicode, shown

__all__ = ["rows_to_arrow", "widen_floats"]

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    OverflowError,
    TypeError,
    ValueError,
)  # UnicodeEncodeError is a ValueError


Row = Mapping[str, Any] | Sequence[Any]


def rows_to_arrow(rows: Sequence[Row], schema: pa.Schema, table: str | None = None) -> pa.Table:
    """Build an Arrow table of ``schema`` from Python rows, column by column.

    Args:
        rows: The rows: mappings by column name (a missing key is null), or sequences of
            values in the schema's column order (a database cursor's tuples).
        schema: The columns wanted. float32 columns (also inside lists, maps and structs)
            are built as float64: the encoder narrows them and refuses overflow.
        table: Table name for error messages.

    Returns:
        The table, with :func:`widen_floats` of ``schema`` as its schema.

    Raises:
        EncodeError: A value does not convert to its column's type (naming table, column,
            row and why; a lone surrogate is said in plain words), or a row of values has
            not one value per column.
    """
    widened = widen_floats(schema)
    columns = _columns(rows, widened.names, table)
    arrays = [_column(values, field, table) for values, field in zip(columns, widened, strict=True)]
    return pa.Table.from_arrays(arrays, schema=widened)


def _columns(rows: Sequence[Row], names: list[str], table: str | None) -> list[Sequence[Any]]:
    """The rows' values column by column: by name from mappings, by position from sequences."""
    if not rows:
        return [[] for _ in names]
    if isinstance(rows[0], Mapping):
        by_name = cast(Sequence[Mapping[str, Any]], rows)
        return [[row.get(name) for row in by_name] for name in names]
    widths = {len(row) for row in rows}
    if widths != {len(names)}:
        raise EncodeError(
            f"rows have {sorted(widths)} values, the schema {len(names)} columns",
            table=table,
            columns=names,
        )
    return list(zip(*rows, strict=True))


def widen_floats(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every float32 (also nested) made float64."""
    return pa.schema(
        [field.with_type(_widen(field.type)) for field in schema], metadata=schema.metadata
    )


def _widen(typ: pa.DataType) -> pa.DataType:
    if pa.types.is_float32(typ):
        return pa.float64()
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        item = typ.value_field.with_type(_widen(typ.value_type))
        return pa.list_(item) if pa.types.is_list(typ) else pa.large_list(item)
    if pa.types.is_map(typ):
        return pa.map_(typ.key_field, typ.item_field.with_type(_widen(typ.item_type)))
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(_widen(f.type)) for f in typ])
    return typ


def _column(values: Sequence[Any], field: pa.Field, table: str | None) -> pa.Array:
    try:
        return pa.array(values, type=field.type)
    except _CONVERSION_ERRORS:
        pass
    for row, value in enumerate(values):
        try:
            pa.array([value], type=field.type)
        except _CONVERSION_ERRORS as exc:
            raise EncodeError(
                f"column {field.name!r} at row {row}: {_why(value, field.type, exc)}",
                table=table,
                column=field.name,
                row=row,
            ) from exc
    raise EncodeError(  # every value converts alone: the column as a whole is too large
        f"column {field.name!r} does not convert to {field.type}", table=table, column=field.name
    )


def _why(value: Any, typ: pa.DataType, exc: Exception) -> str:
    if isinstance(exc, UnicodeEncodeError):
        return not_unicode(exc)
    text = shown(value) if isinstance(value, str) else repr(value)[:200]
    return f"{text} does not convert to {typ}: {exc}"
