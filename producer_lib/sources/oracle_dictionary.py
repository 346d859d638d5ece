"""Oracle types and data dictionary: pure functions, no database needed.

Type mapping (``ALL_TAB_COLUMNS`` names and attributes):

* ``NUMBER(p,0)`` -> INT (p <= 9), LONG (p <= 18), else DECIMAL(p,0); ``NUMBER(p,s)`` ->
  DECIMAL(p,s); ``NUMBER`` without precision -> DECIMAL(38,10) (more decimals fail the load:
  cast in SQL); ``FLOAT``/``BINARY_DOUBLE`` -> DOUBLE; ``BINARY_FLOAT`` -> FLOAT.
* ``VARCHAR2(n)``/``CHAR(n)`` -> VARCHAR(n) (n in characters), ``NVARCHAR2(n)``/``NCHAR(n)`` ->
  NVARCHAR(n); ``CLOB``/``LONG`` -> CLOB; ``NCLOB`` -> NCLOB.
* ``DATE`` (has a time of day, seconds) -> timestamp-millis; ``TIMESTAMP(n)`` (read as UTC),
  ``... WITH [LOCAL] TIME ZONE`` -> timestamp-micros (fetched as Arrow: zoned timestamps as
  ``SYS_EXTRACT_UTC(column)``).
* ``RAW``/``LONG RAW``/``BLOB`` -> BYTES.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from producer_lib.errors import SourceError
from producer_lib.schema import (
    AvroBytes,
    AvroCLOB,
    AvroDecimal,
    AvroDouble,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroNCLOB,
    AvroNVarchar,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroType,
    AvroVarchar,
    ForeignKey,
)
from producer_lib.sources.dictionary import DataDictionary

_UNBOUNDED_NUMBER = AvroDecimal(38, 10)
_Rule = Callable[[int | None, int | None, int | None], AvroType]


def _number(precision: int | None, scale: int | None, length: int | None) -> AvroType:
    if not precision:
        return _UNBOUNDED_NUMBER
    if scale == -127:  # FLOAT(b): binary precision, a floating point number
        return AvroDouble()
    if not scale:
        return (
            AvroInt()
            if precision <= 9
            else AvroLong()
            if precision <= 18
            else AvroDecimal(precision, 0)
        )
    return AvroDecimal(precision, scale)


def _text(cls: type[AvroVarchar] | type[AvroNVarchar]) -> _Rule:
    return lambda precision, scale, length: cls(length) if length else cls(4000)


def _fixed(avro_type: AvroType) -> _Rule:
    return lambda precision, scale, length: avro_type


_TO_AVRO: dict[str, _Rule] = {
    "NUMBER": _number,
    "FLOAT": _fixed(AvroDouble()),
    "BINARY_DOUBLE": _fixed(AvroDouble()),
    "BINARY_FLOAT": _fixed(AvroFloat()),
    "VARCHAR2": _text(AvroVarchar),
    "VARCHAR": _text(AvroVarchar),
    "CHAR": _text(AvroVarchar),
    "NVARCHAR2": _text(AvroNVarchar),
    "NCHAR": _text(AvroNVarchar),
    "CLOB": _fixed(AvroCLOB()),
    "LONG": _fixed(AvroCLOB()),
    "NCLOB": _fixed(AvroNCLOB()),
    "DATE": _fixed(AvroTimestamp()),
    "TIMESTAMP": _fixed(AvroTimestampMicros()),
    "TIMESTAMP WITH TIME ZONE": _fixed(AvroTimestampMicros()),
    "TIMESTAMP WITH LOCAL TIME ZONE": _fixed(AvroTimestampMicros()),
    "RAW": _fixed(AvroBytes()),
    "LONG RAW": _fixed(AvroBytes()),
    "BLOB": _fixed(AvroBytes()),
}


def avro_type_for_oracle(
    data_type: str,
    precision: int | None = None,
    scale: int | None = None,
    char_length: int | None = None,
    column: str = "",
) -> AvroType:
    """Map an Oracle column type (as ``ALL_TAB_COLUMNS.DATA_TYPE`` spells it) to Avro.

    ``TIMESTAMP(6) WITH TIME ZONE`` and ``VARCHAR2(40 CHAR)`` are accepted too: the part in
    parentheses is dropped (the attributes come from the other arguments).

    Raises:
        SourceError: No mapping; names the column and type.
    """
    key = re.sub(r"\s*\([^)]*\)", "", data_type.upper()).strip()
    rule = _TO_AVRO.get(key)
    if rule is None:
        raise SourceError(
            "Unsupported Oracle type: cast the column in SQL", column=column, oracle_type=data_type
        )
    return rule(precision, scale, char_length)


# oracledb's DbType names (cursor.description) -> ALL_TAB_COLUMNS type names
DB_TYPE_NAMES = {
    "DB_TYPE_NUMBER": "NUMBER",
    "DB_TYPE_BINARY_DOUBLE": "BINARY_DOUBLE",
    "DB_TYPE_BINARY_FLOAT": "BINARY_FLOAT",
    "DB_TYPE_VARCHAR": "VARCHAR2",
    "DB_TYPE_CHAR": "CHAR",
    "DB_TYPE_NVARCHAR": "NVARCHAR2",
    "DB_TYPE_NCHAR": "NCHAR",
    "DB_TYPE_CLOB": "CLOB",
    "DB_TYPE_NCLOB": "NCLOB",
    "DB_TYPE_LONG": "LONG",
    "DB_TYPE_DATE": "DATE",
    "DB_TYPE_TIMESTAMP": "TIMESTAMP",
    "DB_TYPE_TIMESTAMP_TZ": "TIMESTAMP WITH TIME ZONE",
    "DB_TYPE_TIMESTAMP_LTZ": "TIMESTAMP WITH LOCAL TIME ZONE",
    "DB_TYPE_RAW": "RAW",
    "DB_TYPE_LONG_RAW": "LONG RAW",
    "DB_TYPE_BLOB": "BLOB",
}


def avro_type_for_description(item: Sequence[Any]) -> AvroType:
    """Map one ``cursor.description`` entry of python-oracledb to an Avro type.

    ``(name, type, display_size, internal_size, precision, scale, null_ok)``; for text
    ``display_size`` is the length in characters.
    """
    name, db_type, display_size, _internal, precision, scale = item[:6]
    data_type = DB_TYPE_NAMES.get(getattr(db_type, "name", str(db_type)), str(db_type))
    return avro_type_for_oracle(data_type, precision, scale, display_size, column=name)


CONSTRAINTS_SQL = """
SELECT c.constraint_name, c.constraint_type, cc.column_name, cc.position,
       r.owner, r.table_name, rc.column_name
FROM all_constraints c
JOIN all_cons_columns cc ON cc.owner = c.owner AND cc.constraint_name = c.constraint_name
LEFT JOIN all_constraints r ON r.owner = c.r_owner AND r.constraint_name = c.r_constraint_name
LEFT JOIN all_cons_columns rc ON rc.owner = r.owner AND rc.constraint_name = r.constraint_name
     AND rc.position = cc.position
WHERE c.owner = :owner AND c.table_name = :table_name AND c.constraint_type IN ('P', 'R')
ORDER BY c.constraint_type, c.constraint_name, cc.position"""

COLUMN_COMMENTS_SQL = """
SELECT column_name, comments FROM all_col_comments
WHERE owner = :owner AND table_name = :table_name AND comments IS NOT NULL"""

TABLE_COMMENT_SQL = """
SELECT comments FROM all_tab_comments WHERE owner = :owner AND table_name = :table_name"""

COLUMN_TYPES_SQL = """
SELECT column_name, data_type, data_precision, data_scale, char_length, nullable
FROM all_tab_columns WHERE owner = :owner AND table_name = :table_name ORDER BY column_id"""


def dictionary_from_rows(
    constraint_rows: Iterable[Sequence[Any]],
    comment_rows: Iterable[Sequence[Any]],
    table_comment: str | None,
) -> DataDictionary:
    """Build the dictionary from :data:`CONSTRAINTS_SQL` and :data:`COLUMN_COMMENTS_SQL` rows.

    Constraint rows: ``(name, type 'P'|'R', column, position, ref owner, ref table,
    ref column)``, ordered by type, name and position.
    """
    primary: list[str] = []
    foreign: dict[str, list[Sequence[Any]]] = {}
    for row in constraint_rows:
        if row[1] == "P":
            primary.append(row[2])
        elif row[1] == "R":
            foreign.setdefault(row[0], []).append(row)
    fks = tuple(
        ForeignKey(tuple(r[2] for r in rows), rows[0][4], rows[0][5], tuple(r[6] for r in rows))
        for rows in foreign.values()
    )
    comments = {str(row[0]): str(row[1]) for row in comment_rows if row[1]}
    return DataDictionary(tuple(primary), fks, comments, table_comment or None)
