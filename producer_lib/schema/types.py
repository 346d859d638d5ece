"""Avro logical types and their mappings to Avro JSON, Arrow, DuckDB and Spark/Delta.

Frozen dataclasses; each mapping is a dispatch table with one small function per type (as in
pyiceberg's visitors)::

    >>> AvroDecimal(10, 2).to_spark()
    'DECIMAL(10,2)'
    >>> avro_type_from_json({"type": "int", "logicalType": "date"})
    AvroDate()

Value rules the encoder enforces: no value is altered without being asked. ``AvroVarchar``
rejects non-ASCII text; ``AvroVarchar``/``AvroNVarchar`` reject text longer than ``length``
unless built with ``truncate=True`` (or the table opts in with ``ValueSchema.truncate_text``):
then longer text is cut to ``length`` characters and counted per column
(``AvroEncoder.truncations``). ``AvroFloat`` rejects a finite value beyond float32's range
(nan and inf stay as they are); decimals beyond their precision are an error; timestamps are
UTC instants; ``AvroSTGeometry``/``AvroSTPoint`` carry WKT text.
``from_avro`` decodes BYTE/SHORT as INT and times as INT/BIGINT; ``to_spark()`` is the Delta type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from producer_lib.errors import SchemaError
from producer_lib.schema.names import decode_name, encode_name, is_valid_avro_name

AvroJson = str | dict[str, Any] | list[Any]
MAX_DECIMAL_PRECISION = 38  # the most Arrow decimal128, DuckDB and Spark all hold


def _logical(base: str, logical_type: str) -> dict[str, Any]:
    return {"type": base, "logicalType": logical_type}


@dataclass(frozen=True)
class AvroType:
    """Base of all Avro types; the mappings dispatch on the concrete class."""

    def to_avro(self) -> AvroJson:
        """Return the Avro JSON of this type (a type name or a dict)."""
        return _TO_AVRO[type(self)](self)

    def to_pyarrow(self) -> pa.DataType:
        """Return the Arrow type holding values of this type."""
        return _TO_PYARROW[type(self)](self)

    def to_duckdb(self) -> str:
        """Return the DuckDB type (as DESCRIBE prints it) of a staging column."""
        return _TO_DUCKDB[type(self)](self)

    def to_spark(self) -> str:
        """Return the Spark SQL / Delta column type, e.g. ``DECIMAL(10,2)``."""
        return _TO_SPARK[type(self)](self)


@dataclass(frozen=True)
class AvroBoolean(AvroType):
    """true/false."""


class AvroByte(AvroType):
    """8-bit signed integer (Avro int, logicalType BYTE)."""


@dataclass(frozen=True)
class AvroShort(AvroType):
    """16-bit signed integer (Avro int, logicalType SHORT)."""


class AvroInt(AvroType):
    """32-bit signed integer."""


@dataclass(frozen=True)
class AvroLong(AvroType):
    """64-bit signed integer."""


class AvroFloat(AvroType):
    """32-bit IEEE float."""


@dataclass(frozen=True)
class AvroDouble(AvroType):
    """64-bit IEEE float."""


class AvroCLOB(AvroType):
    """Long text (Avro string, logicalType CLOB)."""


@dataclass(frozen=True)
class AvroNCLOB(AvroType):
    """Long Unicode text (Avro string, logicalType NCLOB)."""


class AvroString(AvroType):
    """Unicode text without a length limit."""


@dataclass(frozen=True)
class AvroUUID(AvroType):
    """UUID in its 36-character text form."""


class AvroURI(AvroType):
    """A URI as text."""


@dataclass(frozen=True)
class AvroBytes(AvroType):
    """Binary data."""


class AvroDate(AvroType):
    """Calendar date (days since 1970-01-01)."""


@dataclass(frozen=True)
class AvroTimeMillis(AvroType):
    """Time of day in milliseconds."""


class AvroTimeMicros(AvroType):
    """Time of day in microseconds."""


@dataclass(frozen=True)
class AvroTimestamp(AvroType):
    """UTC instant in milliseconds (timestamp-millis)."""


class AvroTimestampMicros(AvroType):
    """UTC instant in microseconds (timestamp-micros)."""


@dataclass(frozen=True)
class AvroSTGeometry(AvroType):
    """A geometry as WKT text."""


class AvroSTPoint(AvroType):
    """A point as WKT text."""


@dataclass(frozen=True)
class AvroDecimal(AvroType):
    """Exact decimal number with ``precision`` digits, ``scale`` of them after the point."""

    precision: int
    scale: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.precision <= MAX_DECIMAL_PRECISION:
            raise SchemaError(
                f"Decimal precision must be 1..{MAX_DECIMAL_PRECISION}", precision=self.precision
            )
        if not 0 <= self.scale <= self.precision:
            raise SchemaError(
                "Decimal scale must be 0..precision", precision=self.precision, scale=self.scale
            )


@dataclass(frozen=True)
class _TextWithLength(AvroType):
    """Text of at most ``length`` characters.

    Attributes:
        length: Most characters a value may have.
        truncate: Opt-in: cut longer text to ``length`` characters (each cut counted per
            column) instead of refusing it. Written as ``"truncate": true`` into the Avro type.
    """

    length: int
    truncate: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.length, int) or self.length < 1:
            raise SchemaError("Text length must be a positive integer", length=self.length)
        if not isinstance(self.truncate, bool):
            raise SchemaError("truncate must be True or False", truncate=self.truncate)


@dataclass(frozen=True)
class AvroVarchar(_TextWithLength):
    """ASCII text of at most ``length`` characters.

    Non-ASCII text is an error; longer text is an error unless ``truncate=True``.
    """


@dataclass(frozen=True)
class AvroNVarchar(_TextWithLength):
    """Unicode text of at most ``length`` characters; longer text is an error.

    ``AvroNVarchar(1024, truncate=True)`` cuts longer text to 1024 characters instead and
    counts each cut (``AvroEncoder.truncations``).
    """


@dataclass(frozen=True)
class AvroArray(AvroType):
    """A list of ``items``; ``items_nullable`` lets elements be null (``["null", T]``)."""

    items: AvroType
    items_nullable: bool = False


@dataclass(frozen=True)
class AvroMap(AvroType):
    """A map from string keys to ``values``; ``values_nullable`` lets values be null."""

    values: AvroType
    values_nullable: bool = False


@dataclass(frozen=True)
class AvroField:
    """A field of a record.

    Attributes:
        name: The original (source) name; the Avro name is ``encode_name(name)``.
        type: The field's type.
        nullable: Whether the field may be null (Avro ``["null", T]`` with default null).
        doc: Column comment.
        properties: Further field-level properties kept in the Avro JSON.
    """

    name: str
    type: AvroType
    nullable: bool = True
    doc: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        encode_name(self.name)  # fail early on an empty name

    @property
    def avro_name(self) -> str:
        """The field name as written in the Avro schema."""
        return encode_name(self.name)

    def to_avro(self) -> dict[str, Any]:
        """Return the Avro field JSON: name, type, default, doc, sourceName, properties."""
        type_json = self.type.to_avro()
        result: dict[str, Any] = {"name": self.avro_name}
        if self.nullable:
            result.update(type=["null", type_json], default=None)
        else:
            result["type"] = type_json
        if self.doc is not None:
            result["doc"] = self.doc
        if self.avro_name != self.name:
            result["sourceName"] = self.name
        result.update(self.properties)
        return result

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> AvroField:
        """Parse an Avro field JSON made by :meth:`to_avro`."""
        name = data.get("sourceName") or decode_name(data["name"])
        avro_type, nullable = _parse_maybe_null(data["type"])
        known = {"name", "type", "default", "doc", "sourceName"}
        properties = {key: value for key, value in data.items() if key not in known}
        return cls(name, avro_type, nullable, data.get("doc"), properties)


@dataclass(frozen=True)
class AvroRecord(AvroType):
    """A nested record; ``name`` must be a valid Avro name, unique within the schema."""

    name: str
    fields: tuple[AvroField, ...]
    namespace: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        if not is_valid_avro_name(self.name):
            raise SchemaError("Record name is not a valid Avro name", record=self.name)
        seen: set[str] = set()
        for item in self.fields:
            if item.avro_name in seen:
                raise SchemaError("Duplicate field in record", record=self.name, column=item.name)
            seen.add(item.avro_name)


_TSTZ = "TIMESTAMP WITH TIME ZONE"  # an instant; DuckDB has no millisecond variant
_UTC_MS, _UTC_US = pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")

# One row per parameterless type: its Avro JSON, Arrow type, DuckDB type, Spark/Delta type.
_SIMPLE: dict[type[AvroType], tuple[AvroJson, pa.DataType, str, str]] = {
    AvroBoolean: ("boolean", pa.bool_(), "BOOLEAN", "BOOLEAN"),
    AvroInt: ("int", pa.int32(), "INTEGER", "INT"),
    AvroLong: ("long", pa.int64(), "BIGINT", "BIGINT"),
    AvroFloat: ("float", pa.float32(), "FLOAT", "FLOAT"),
    AvroDouble: ("double", pa.float64(), "DOUBLE", "DOUBLE"),
    AvroString: ("string", pa.string(), "VARCHAR", "STRING"),
    AvroBytes: ("bytes", pa.binary(), "BLOB", "BINARY"),
    AvroByte: (_logical("int", "BYTE"), pa.int8(), "TINYINT", "TINYINT"),
    AvroShort: (_logical("int", "SHORT"), pa.int16(), "SMALLINT", "SMALLINT"),
    AvroCLOB: (_logical("string", "CLOB"), pa.string(), "VARCHAR", "STRING"),
    AvroNCLOB: (_logical("string", "NCLOB"), pa.string(), "VARCHAR", "STRING"),
    AvroURI: (_logical("string", "URI"), pa.string(), "VARCHAR", "STRING"),
    AvroUUID: (_logical("string", "uuid"), pa.string(), "UUID", "STRING"),
    AvroSTGeometry: (_logical("string", "ST_GEOMETRY"), pa.string(), "VARCHAR", "STRING"),
    AvroSTPoint: (_logical("string", "ST_POINT"), pa.string(), "VARCHAR", "STRING"),
    AvroDate: (_logical("int", "date"), pa.date32(), "DATE", "DATE"),
    # from_avro yields INT / BIGINT for times, and Delta has no TIME type.
    AvroTimeMillis: (_logical("int", "time-millis"), pa.time32("ms"), "TIME", "INT"),
    AvroTimeMicros: (_logical("long", "time-micros"), pa.time64("us"), "TIME", "BIGINT"),
    AvroTimestamp: (_logical("long", "timestamp-millis"), _UTC_MS, _TSTZ, "TIMESTAMP"),
    AvroTimestampMicros: (_logical("long", "timestamp-micros"), _UTC_US, _TSTZ, "TIMESTAMP"),
}


def _simple_avro(avro_type: AvroType) -> AvroJson:
    spec = _SIMPLE[type(avro_type)][0]
    return dict(spec) if isinstance(spec, dict) else spec


def _maybe_null(avro_type: AvroType, nullable: bool) -> AvroJson:
    return ["null", avro_type.to_avro()] if nullable else avro_type.to_avro()


def _record_avro(record: AvroRecord) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "record", "name": record.name}
    if record.namespace is not None:
        result["namespace"] = record.namespace
    result["fields"] = [item.to_avro() for item in record.fields]
    return result


def _text_avro(logical_type: str, text: _TextWithLength) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "string", "logicalType": logical_type, "length": text.length}
    if text.truncate:
        result["truncate"] = True  # only when asked: the schema of other tables stays as it was
    return result


_TO_AVRO: dict[type[AvroType], Callable[[Any], AvroJson]] = {
    **{cls: _simple_avro for cls in _SIMPLE},
    AvroDecimal: lambda t: {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": t.precision,
        "scale": t.scale,
    },
    AvroVarchar: lambda t: _text_avro("VARCHAR", t),
    AvroNVarchar: lambda t: _text_avro("NVARCHAR", t),
    AvroArray: lambda t: {"type": "array", "items": _maybe_null(t.items, t.items_nullable)},
    AvroMap: lambda t: {"type": "map", "values": _maybe_null(t.values, t.values_nullable)},
    AvroRecord: _record_avro,
}


def _record_pyarrow(record: AvroRecord) -> pa.DataType:
    return pa.struct(
        [pa.field(f.name, f.type.to_pyarrow(), nullable=f.nullable) for f in record.fields]
    )


_TO_PYARROW: dict[type[AvroType], Callable[[Any], pa.DataType]] = {
    **{cls: (lambda t: _SIMPLE[type(t)][1]) for cls in _SIMPLE},
    AvroDecimal: lambda t: pa.decimal128(t.precision, t.scale),
    AvroVarchar: lambda t: pa.string(),
    AvroNVarchar: lambda t: pa.string(),
    AvroArray: lambda t: pa.list_(pa.field("item", t.items.to_pyarrow(), t.items_nullable)),
    AvroMap: lambda t: pa.map_(
        pa.string(), pa.field("value", t.values.to_pyarrow(), t.values_nullable)
    ),
    AvroRecord: _record_pyarrow,
}


def _duckdb_struct(record: AvroRecord) -> str:
    parts = ('"' + f.name.replace('"', '""') + '" ' + f.type.to_duckdb() for f in record.fields)
    return "STRUCT(" + ", ".join(parts) + ")"


_TO_DUCKDB: dict[type[AvroType], Callable[[Any], str]] = {
    **{cls: (lambda t: _SIMPLE[type(t)][2]) for cls in _SIMPLE},
    AvroDecimal: lambda t: f"DECIMAL({t.precision},{t.scale})",
    AvroVarchar: lambda t: "VARCHAR",
    AvroNVarchar: lambda t: "VARCHAR",
    AvroArray: lambda t: f"{t.items.to_duckdb()}[]",
    AvroMap: lambda t: f"MAP(VARCHAR, {t.values.to_duckdb()})",
    AvroRecord: _duckdb_struct,
}


def _spark_struct(record: AvroRecord) -> str:
    # Original names: casting from_avro's struct (encoded names) to this type renames them.
    parts = ("`" + f.name.replace("`", "``") + "`: " + f.type.to_spark() for f in record.fields)
    return "STRUCT<" + ", ".join(parts) + ">"


_TO_SPARK: dict[type[AvroType], Callable[[Any], str]] = {
    **{cls: (lambda t: _SIMPLE[type(t)][3]) for cls in _SIMPLE},
    AvroDecimal: lambda t: f"DECIMAL({t.precision},{t.scale})",
    AvroVarchar: lambda t: "STRING",
    AvroNVarchar: lambda t: "STRING",
    AvroArray: lambda t: f"ARRAY<{t.items.to_spark()}>",
    AvroMap: lambda t: f"MAP<STRING, {t.values.to_spark()}>",
    AvroRecord: _spark_struct,
}


def _no_properties(cls: type[AvroType]) -> Callable[[dict[str, Any]], AvroType]:
    """The parser of a type that has no properties of its own: its class, called."""
    return lambda _: cls()


def _simple_key(spec: AvroJson) -> tuple[str, str | None]:
    if isinstance(spec, dict):
        return spec["type"], spec["logicalType"]
    return str(spec), None


_FROM_JSON: dict[tuple[str, str | None], Callable[[dict[str, Any]], AvroType]] = {
    **{_simple_key(spec): _no_properties(cls) for cls, (spec, *_) in _SIMPLE.items()},
    ("bytes", "decimal"): lambda d: AvroDecimal(_int_prop(d, "precision"), d.get("scale", 0)),
    ("string", "VARCHAR"): lambda d: AvroVarchar(_int_prop(d, "length"), d.get("truncate") is True),
    ("string", "NVARCHAR"): lambda d: AvroNVarchar(
        _int_prop(d, "length"), d.get("truncate") is True
    ),
    ("array", None): lambda d: AvroArray(*_parse_maybe_null(d["items"])),
    ("map", None): lambda d: AvroMap(*_parse_maybe_null(d["values"])),
    ("record", None): lambda d: AvroRecord(
        d["name"], tuple(AvroField.from_avro(f) for f in d["fields"]), d.get("namespace")
    ),
}


def _int_prop(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int):
        raise SchemaError(f"Avro type needs an integer {key!r}", avro_type=dict(data))
    return value


def _parse_maybe_null(data: AvroJson) -> tuple[AvroType, bool]:
    if isinstance(data, list):
        branches = [branch for branch in data if branch != "null"]
        if len(branches) != 1 or len(data) != 2:
            raise SchemaError("Only unions of null and one type are supported", avro_type=data)
        return avro_type_from_json(branches[0]), True
    return avro_type_from_json(data), False


def avro_type_from_json(data: AvroJson) -> AvroType:
    """Parse the Avro JSON of a type, as :meth:`AvroType.to_avro` writes it.

    Unknown logical types fall back to their base type, as the Avro specification asks.
    Unions are not types here: nullability belongs to fields, array items and map values.

    Raises:
        SchemaError: The JSON is not a type this package supports.
    """
    if isinstance(data, list):
        raise SchemaError("A union is not a type; only fields, items, values are nullable")
    spec = data if isinstance(data, dict) else {"type": data}
    base, logical = spec.get("type"), spec.get("logicalType")
    if isinstance(base, (dict, list)):
        return avro_type_from_json(base)
    parser = _FROM_JSON.get((str(base), logical)) or _FROM_JSON.get((str(base), None))
    if parser is None:
        raise SchemaError("Unsupported Avro type", avro_type=data)
    return parser(spec)
