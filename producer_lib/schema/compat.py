"""Whether two value schemas can feed one lakehouse table.

The writer keys a Delta table by its value schema's ``namespace.name``, not by topic: every
topic whose value schema has that name writes the same table. Two such schemas can share the
table when each column they have in common has the same Delta type, or types of which one
widens to the other (Delta type widening, as the writer applies it:
``TINYINT < SMALLINT < INT < BIGINT``, ``FLOAT < DOUBLE``, ``DATE < TIMESTAMP_NTZ``, a decimal
that keeps its scale and integer digits or grows them, an integer into a decimal with room
for it). Columns present in only one of them are fine: the table gains nullable columns.
Anything else is a *clash*: the table would stop at the first row of the other kind.

Column names compare case-insensitively, as Spark resolves Delta columns. ``VARCHAR(10)`` and
``VARCHAR(20)`` are both ``STRING``; nullability does not matter.

Pure: no Kafka, Spark or DuckDB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from producer_lib.schema.value_schema import ValueSchema

__all__ = ["ColumnClash", "column_clashes", "delta_types_merge"]

_INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_INTEGRAL_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 20}
_WIDENINGS = {("FLOAT", "DOUBLE"), ("DATE", "TIMESTAMP_NTZ")}
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")


@dataclass(frozen=True)
class ColumnClash:
    """A column two value schemas of one table type in ways Delta cannot merge.

    Attributes:
        column: The column (as the first schema spells it).
        type: Its Delta type in the first schema.
        other_type: Its Delta type in the other schema.
    """

    column: str
    type: str
    other_type: str


def column_clashes(schema: ValueSchema, other: ValueSchema) -> list[ColumnClash]:
    """Columns of ``schema`` whose Delta type does not merge with ``other``'s, in its order."""
    others = {name.casefold(): item for name, item in other.fields.items()}
    clashes = []
    for name, item in schema.fields.items():
        found = others.get(name.casefold())
        if found is None:
            continue
        mine, theirs = item.type.to_spark(), found.type.to_spark()
        if not delta_types_merge(mine, theirs):
            clashes.append(ColumnClash(name, mine, theirs))
    return clashes


def delta_types_merge(a: str, b: str) -> bool:
    """True when a Delta column can hold values of both types (equal, or one widens)."""
    a, b = _norm(a), _norm(b)
    return a == b or _widens(a, b) or _widens(b, a)


def _norm(spark_type: str) -> str:
    return re.sub(r"\s+", "", spark_type).upper()


def _widens(old: str, new: str) -> bool:
    """True when Delta type widening turns ``old`` into ``new`` without losing values."""
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL.index(old) <= _INTEGRAL.index(new)
    if (old, new) in _WIDENINGS:
        return True
    target = _DECIMAL.fullmatch(new)
    if target is None:
        return False
    precision, scale = int(target[1]), int(target[2])
    source = _DECIMAL.fullmatch(old)
    if source is not None:
        old_precision, old_scale = int(source[1]), int(source[2])
        return scale >= old_scale and precision - scale >= old_precision - old_scale
    return old in _INTEGRAL and scale == 0 and precision >= _INTEGRAL_DIGITS[old]
