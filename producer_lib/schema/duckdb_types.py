"""DuckDB column types (as ``DESCRIBE`` prints them) to Avro types. Pure: no DuckDB import.

Mapping decisions:

* ``UTINYINT``/``USMALLINT``/``UINTEGER`` widen to the next signed type (SHORT, INT, LONG).
* ``UBIGINT`` becomes ``DECIMAL(20,0)``; ``HUGEINT``/``UHUGEINT`` become ``DECIMAL(38,0)``
  (the widest decimal Spark holds): a value with 39 digits fails at encode time.
* ``TIMESTAMP`` (no zone) is read as UTC; it, ``TIMESTAMP WITH TIME ZONE`` and
  ``TIMESTAMP_NS`` (truncated to microseconds) become timestamp-micros; ``TIMESTAMP_S`` and
  ``TIMESTAMP_MS`` become timestamp-millis. ``TIME`` becomes time-micros.
* ``VARCHAR``, ``JSON`` and ``ENUM(...)`` become string; ``GEOMETRY`` becomes ST_GEOMETRY
  (WKT text: the staging table is VARCHAR, a cast DuckDB does on insert).
* ``T[]`` and ``T[n]`` become arrays, ``STRUCT(...)`` records, ``MAP(VARCHAR, V)`` maps;
  elements, struct fields and map values are nullable, as in DuckDB. Avro map keys are
  strings, so other map keys are an error: cast the map in SQL.
* Anything else (INTERVAL, BIT, UNION, TIME WITH TIME ZONE, BIGNUM, ...) is a
  :class:`~producer_lib.errors.SchemaError` naming the column and type.

Nested records are named after their column (and struct field) with the table and parent
names as namespace, so every record's full name is unique in the schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from producer_lib.errors import SchemaError
from producer_lib.schema.names import encode_name
from producer_lib.schema.types import (
    AvroArray,
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroField,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroRecord,
    AvroShort,
    AvroSTGeometry,
    AvroString,
    AvroTimeMicros,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroType,
    AvroUUID,
)
from producer_lib.schema.value_schema import ValueSchema

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?: [A-Za-z_][A-Za-z0-9_]*)*")
_PARAM = re.compile(r"\s*(-?\d+|'(?:[^']|'')*')\s*")
_IDENT = re.compile(r'"((?:[^"]|"")*)"|([^\s",()\[\]]+)')


@dataclass(frozen=True)
class DuckType:
    """A parsed DuckDB type: ``name``, parameters (``DECIMAL(10,2)``), children.

    ``children`` are ``(field name, type)`` pairs for STRUCT/UNION, ``(None, type)`` for
    MAP key and value and for the element of a LIST (name ``LIST``).
    """

    name: str
    params: tuple[int | str, ...] = ()
    children: tuple[tuple[str | None, DuckType], ...] = ()


class _Parser:
    """Recursive-descent parser of one DuckDB type string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> SchemaError:
        return SchemaError(
            f"Cannot parse DuckDB type: {what}", duckdb_type=self.text, position=self.pos
        )

    def skip(self, token: str | None = None) -> bool:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        if token is not None and self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.skip(token):
            raise self.fail(f"expected {token!r}")

    def parse(self) -> DuckType:
        result = self.type()
        self.skip()
        if self.pos != len(self.text):
            raise self.fail("unexpected text")
        return result

    def type(self) -> DuckType:
        self.skip()
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected a type name")
        self.pos = match.end()
        name = match.group(0).upper()
        result = self.arguments(name) if self.skip("(") else DuckType(name)
        while self.skip("["):
            size = re.compile(r"\s*\d*\s*").match(self.text, self.pos)
            self.pos = size.end() if size else self.pos
            self.expect("]")
            result = DuckType("LIST", children=((None, result),))
        return result

    def arguments(self, name: str) -> DuckType:
        if name in ("STRUCT", "UNION"):
            children = [self.struct_field()]
            while self.skip(","):
                children.append(self.struct_field())
            self.expect(")")
            return DuckType(name, children=tuple(children))
        if name == "MAP":
            key = self.type()
            self.expect(",")
            value = self.type()
            self.expect(")")
            return DuckType(name, children=((None, key), (None, value)))
        return DuckType(name, params=self.params())

    def struct_field(self) -> tuple[str | None, DuckType]:
        self.skip()
        match = _IDENT.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected a struct field name")
        self.pos = match.end()
        quoted = match.group(1)
        return (quoted.replace('""', '"') if quoted is not None else match.group(2)), self.type()

    def params(self) -> tuple[int | str, ...]:
        values: list[int | str] = []
        while True:
            match = _PARAM.match(self.text, self.pos)
            if match is None:
                raise self.fail("expected a number or a quoted string")
            self.pos = match.end()
            token = match.group(1)
            values.append(token[1:-1].replace("''", "'") if token[0] == "'" else int(token))
            if not self.skip(","):
                self.expect(")")
                return tuple(values)


def parse_duckdb_type(type_string: str) -> DuckType:
    """Parse a DuckDB type string such as ``STRUCT("a b" INTEGER, c VARCHAR[])``.

    Raises:
        SchemaError: The string is not a well-formed DuckDB type.
    """
    return _Parser(type_string).parse()


Path = tuple[str, ...]
_Rule = Callable[[DuckType, Path], AvroType]


def _decimal(duck: DuckType, path: Path) -> AvroType:
    precision, scale = (duck.params + (18, 3))[:2] if duck.params else (18, 3)
    return AvroDecimal(int(precision), int(scale))


def _list(duck: DuckType, path: Path) -> AvroType:
    return AvroArray(_convert(duck.children[0][1], path), items_nullable=True)


def _map(duck: DuckType, path: Path) -> AvroType:
    (_, key), (_, value) = duck.children
    if key.name != "VARCHAR":
        raise SchemaError(
            "Avro map keys are strings: cast the map in SQL, e.g. CAST(col AS MAP(VARCHAR, V))",
            column=".".join(path),
            duckdb_type=key.name,
        )
    return AvroMap(_convert(value, path), values_nullable=True)


def _struct(duck: DuckType, path: Path) -> AvroType:
    fields = tuple(
        AvroField(str(name), _convert(child, (*path, str(name)))) for name, child in duck.children
    )
    namespace = ".".join(encode_name(part) for part in path[:-1]) or None
    return AvroRecord(encode_name(path[-1]), fields, namespace)


def _simple(avro_type: AvroType) -> _Rule:
    return lambda duck, path: avro_type


_TO_AVRO: dict[str, _Rule] = {
    "BOOLEAN": _simple(AvroBoolean()),
    "TINYINT": _simple(AvroByte()),
    "SMALLINT": _simple(AvroShort()),
    "INTEGER": _simple(AvroInt()),
    "BIGINT": _simple(AvroLong()),
    "UTINYINT": _simple(AvroShort()),
    "USMALLINT": _simple(AvroInt()),
    "UINTEGER": _simple(AvroLong()),
    "UBIGINT": _simple(AvroDecimal(20, 0)),
    "HUGEINT": _simple(AvroDecimal(38, 0)),
    "UHUGEINT": _simple(AvroDecimal(38, 0)),
    "FLOAT": _simple(AvroFloat()),
    "DOUBLE": _simple(AvroDouble()),
    "DECIMAL": _decimal,
    "VARCHAR": _simple(AvroString()),
    "JSON": _simple(AvroString()),
    "ENUM": _simple(AvroString()),
    "BLOB": _simple(AvroBytes()),
    "UUID": _simple(AvroUUID()),
    "GEOMETRY": _simple(AvroSTGeometry()),
    "DATE": _simple(AvroDate()),
    "TIME": _simple(AvroTimeMicros()),
    "TIMESTAMP": _simple(AvroTimestampMicros()),
    "TIMESTAMP WITH TIME ZONE": _simple(AvroTimestampMicros()),
    "TIMESTAMP_NS": _simple(AvroTimestampMicros()),
    "TIMESTAMP_MS": _simple(AvroTimestamp()),
    "TIMESTAMP_S": _simple(AvroTimestamp()),
    "LIST": _list,
    "MAP": _map,
    "STRUCT": _struct,
}


def _convert(duck: DuckType, path: Path) -> AvroType:
    rule = _TO_AVRO.get(duck.name)
    if rule is None:
        raise SchemaError(
            "Unsupported DuckDB type: cast the column in SQL (e.g. to VARCHAR)",
            column=".".join(path),
            duckdb_type=duck.name,
        )
    return rule(duck, path)


def avro_type_from_duckdb(type_string: str, column: str = "value", table: str = "") -> AvroType:
    """Map a DuckDB type string to an Avro type.

    Args:
        type_string: The type as ``DESCRIBE`` prints it, e.g. ``DECIMAL(18,3)``.
        column: The column's name: names a nested record and appears in errors.
        table: The table's name: the namespace of nested records.

    Raises:
        SchemaError: The type is malformed or has no Avro counterpart.
    """
    try:
        return _convert(parse_duckdb_type(type_string), (table, column) if table else (column,))
    except SchemaError as exc:
        raise SchemaError(
            exc.message, **{**exc.context, "column": column, "duckdb_type": type_string}
        ) from exc


def value_schema_from_describe(
    name: str, namespace: str, rows: Iterable[Sequence[Any]]
) -> ValueSchema:
    """Build a value schema from DuckDB ``DESCRIBE`` rows.

    Args:
        name: Table name.
        namespace: Namespace of the schema.
        rows: ``(column_name, column_type, nullable)`` tuples; ``nullable`` is a bool or
            DESCRIBE's ``"YES"``/``"NO"``. Full DESCRIBE rows work too: a fourth item
            ``"PRI"`` adds the column to the primary key, in row order.

    Raises:
        SchemaError: A type is unsupported, or a column name is invalid or duplicate.
    """
    schema = ValueSchema(name, namespace)
    for row in rows:
        column, type_string, nullable = row[0], row[1], row[2]
        if isinstance(nullable, str):
            nullable = nullable.upper() != "NO"
        schema.add_field(
            column, avro_type_from_duckdb(type_string, column, name), None, bool(nullable)
        )
        if len(row) > 3 and row[3] == "PRI":
            schema.add_primary_key(column)
    return schema
