"""A table's raw rows decoded in the driver, into Arrow: no Spark job.

For a table with few rows in a batch, Spark's decode costs a job whatever the rows; the
driver decodes them instead (:class:`DriverDecoder`): by DuckDB's ``avro`` extension into
columns from :data:`COLUMNS_FROM_ROWS` rows (:mod:`lakehouse_writer.read.avro_arrow`), by
fastavro a row at a time below that. Every Kafka key is decoded too and must agree with its
value (:mod:`lakehouse_writer.read.keys`). The result is the table's decoded rows as Spark's
decode gives them: the table's columns in its types, then ``topic``, ``partition``, ``offset``.

Anything it cannot decode exactly as Spark's decode would — a row that does not decode, a key
that disagrees or is missing, a row type the rules do not know, a nested column, a value
Arrow cannot take as the column's type — raises :class:`NotDecoded`: Spark's decode then
takes the table's rows, with its rejections and reasons.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse_writer.errors import DecodeError as WriterDecodeError
from lakehouse_writer.read.avro_arrow import ArrowDecoder, DecodeError
from lakehouse_writer.read.framing import HEADER, header_length, header_tag
from lakehouse_writer.read.keys import KeySchemaRef, key_pairs
from lakehouse_writer.rules.row_types import KNOWN
from producer_lib.schema import ValueSchema
from producer_lib.schema.value_schema import TECHNICAL_FIELD_NAMES

if TYPE_CHECKING:
    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["COLUMNS_FROM_ROWS", "DriverDecoder", "NotDecoded", "RawRows", "by_header"]

# A table's rows from which DuckDB decodes them, not fastavro: a DuckDB decode costs some 4 ms
# whatever its size, fastavro some 30 us a row (docs/PERFORMANCE.md).
COLUMNS_FROM_ROWS = 500
_KNOWN = pa.array(sorted(KNOWN), pa.string())
_NO_END = 2**31 - 1  # longer than any value of a binary column
WHERE_FROM = ("topic", "partition", "offset")


class NotDecoded(WriterDecodeError):
    """The driver does not decode this table's rows; Spark's decode is to (the reason)."""


@dataclass(frozen=True)
class RawRows:
    """A table's rows in the batch as they came from Kafka, by column (Arrow)."""

    topics: pa.Array
    partitions: pa.Array
    offsets: pa.Array
    keys: pa.Array
    values: pa.Array

    def __len__(self) -> int:
        return len(self.values)

    def where(self, i: int) -> str:
        """Where row ``i`` is, for a message."""
        return f"partition {self.partitions[i].as_py()}, offset {self.offsets[i].as_py()}"

    def where_from(self) -> dict[str, pa.Array]:
        """The ``topic``, ``partition`` and ``offset`` columns."""
        return {
            "topic": self.topics.cast(pa.string()),
            "partition": self.partitions.cast(pa.int32()),
            "offset": self.offsets.cast(pa.int64()),
        }


_RAW = ("topic", "partition", "offset", "key", "value")


def by_header(found: pa.Table) -> dict[bytes, RawRows]:
    """Raw rows by header, from rows with each header's together (``BatchScan.rows_of``)."""
    if not found.num_rows:
        return {}
    found = found.combine_chunks()
    columns = [found.column(c).chunk(0) for c in _RAW]
    runs = pc.run_end_encode(found.column(HEADER).chunk(0))
    found_by: dict[bytes, RawRows] = {}
    start = 0
    for head, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        found_by[bytes(head)] = RawRows(*(c.slice(start, end - start) for c in columns))
        start = end
    return found_by


class DriverDecoder:
    """Decodes a table's raw rows in the driver (see the module docstring)."""

    def __init__(self) -> None:
        self._parsed: dict[str, Any] = {}  # schema JSON -> fastavro's parsed schema
        self._columns = ArrowDecoder()

    def warm_up(self) -> None:
        """Load DuckDB's Avro reader now rather than on the first batch's path."""
        self._columns.available  # noqa: B018 - opens the connection, loads the extension

    def decode(
        self,
        raw: RawRows,
        header: bytes,
        schema_json: str,
        schema: ValueSchema,
        keys: tuple[KeySchemaRef, ...],
        info: TableInfo,
    ) -> pa.Table:
        """The rows decoded: the table's columns in its types, then where each came from.

        Raises:
            NotDecoded: A row the driver does not decode as Spark would (see above).
        """
        if not _plain(info):
            raise NotDecoded("a nested column (Spark's decode names its fields)")
        if (
            len(raw) >= COLUMNS_FROM_ROWS
            and self._columns.decodes(schema_json)
            and all(self._columns.decodes(ref.schema_json) for ref in keys)
        ):
            payload, avro_of = self._by_columns(raw, header, schema_json, schema, keys, info)
        else:
            payload, avro_of = self._by_rows(raw, header, schema_json, schema, keys, info), None
        try:
            table = _in_table_columns(payload, avro_of, _arrow_schema(info))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise NotDecoded(f"a value Arrow cannot convert to its column's type: {exc}") from exc
        for name, column in raw.where_from().items():
            table = table.append_column(name, column)
        return table

    def _by_rows(
        self,
        raw: RawRows,
        header: bytes,
        schema_json: str,
        schema: ValueSchema,
        keys: tuple[KeySchemaRef, ...],
        info: TableInfo,
    ) -> pa.Table:
        """fastavro, a row at a time: the payload in the table's columns."""
        from fastavro import schemaless_reader

        parsed = self._parse(schema_json)
        pairs = [(ref, key_pairs(schema, ref), self._parse(ref.schema_json)) for ref in keys]
        skip = header_length(header_tag(header))
        fields = [(info.column(f.name), f.avro_name) for f in schema.fields.values()]
        values, kafka_keys = raw.values.to_pylist(), raw.keys.to_pylist()
        rows = []
        for i, body in enumerate(values):
            where = raw.where(i)
            try:
                value: Any = schemaless_reader(io.BytesIO(body[skip:]), parsed, None)
            except Exception as exc:  # fastavro raises what the bytes happen to trip
                raise NotDecoded(f"a value does not decode ({where}): {exc!r}") from exc
            change = value.get("__change_type") if isinstance(value, dict) else None
            if change not in KNOWN:
                raise NotDecoded(f"row type {change!r} ({where})")
            _check_key(kafka_keys[i], value, pairs, where)
            row = {name: value.get(avro) for name, avro in fields}
            row.update({name: value.get(name) for name in TECHNICAL_FIELD_NAMES})
            rows.append(row)
        try:
            return pa.Table.from_pylist(rows, schema=_arrow_schema(info))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise NotDecoded(f"a value Arrow cannot convert to its column's type: {exc}") from exc

    def _by_columns(
        self,
        raw: RawRows,
        header: bytes,
        schema_json: str,
        schema: ValueSchema,
        keys: tuple[KeySchemaRef, ...],
        info: TableInfo,
    ) -> tuple[pa.Table, Mapping[str, str]]:
        """DuckDB's decode into columns (by Avro name); the keys checked in columns too."""
        skip = header_length(header_tag(header))
        try:
            payload = self._columns.decode(schema_json, _after(raw.values, skip))
        except DecodeError as exc:
            raise NotDecoded(f"the values do not decode: {exc}") from exc
        changes = payload.column("__change_type")
        wrong = _first(pc.invert(pc.fill_null(pc.is_in(changes, value_set=_KNOWN), False)))
        if wrong is not None:
            raise NotDecoded(f"row type {changes[wrong].as_py()!r} ({raw.where(wrong)})")
        self._check_keys(raw, schema, keys, payload)
        return payload, {info.column(f.name): f.avro_name for f in schema.fields.values()}

    def _check_keys(
        self, raw: RawRows, schema: ValueSchema, keys: tuple[KeySchemaRef, ...], payload: pa.Table
    ) -> None:
        """:class:`NotDecoded` unless every row's Kafka key agrees with its value."""
        schema_of = pa.nulls(len(raw), pa.int32())  # the key schema (of keys) of a row
        for j, ref in reversed(list(enumerate(keys))):  # the first that matches wins
            framed = pc.equal(pc.binary_slice(raw.keys, 0, len(ref.header)), ref.header)
            schema_of = pc.if_else(pc.fill_null(framed, False), j, schema_of)
        unknown = _first(pc.is_null(schema_of))
        if unknown is not None:
            where = raw.where(unknown)
            raise NotDecoded(f"a Kafka key is missing or of an unknown writer schema ({where})")
        for j, ref in enumerate(keys):
            indices = pc.indices_nonzero(pc.equal(schema_of, j))
            if not len(indices):
                continue
            pairs = key_pairs(schema, ref)
            if isinstance(pairs, str):
                raise NotDecoded(pairs)
            bodies = _after(raw.keys.take(indices), len(ref.header))
            try:
                decoded = self._columns.decode(ref.schema_json, bodies)
            except DecodeError as exc:
                raise NotDecoded(f"a Kafka key does not decode: {exc}") from exc
            values = payload.take(indices)
            for key_field, value_field in pairs:
                agree = pc.fill_null(
                    pc.equal(
                        decoded.column(key_field.avro_name), values.column(value_field.avro_name)
                    ),
                    False,
                )
                first = _first(pc.invert(agree))
                if first is not None:
                    where = raw.where(indices[first].as_py())
                    raise NotDecoded(f"a Kafka key disagrees with its value ({where})")

    def _parse(self, schema_json: str) -> Any:
        from fastavro import parse_schema

        parsed = self._parsed.get(schema_json)
        if parsed is None:
            parsed = self._parsed[schema_json] = parse_schema(json.loads(schema_json))
        return parsed


def _in_table_columns(
    payload: pa.Table, avro_of: Mapping[str, str] | None, schema: pa.Schema
) -> pa.Table:
    """``payload`` in the table's columns and types (by Avro name when ``avro_of`` is given).

    A table column the writer schema does not have is null, even where another column's
    Avro name is spelled as it (``ORDER DATE`` is ``ORDER_DATE`` in Avro).
    """
    if avro_of is None:
        return payload
    columns = []
    for target in schema:
        technical = target.name if target.name in TECHNICAL_FIELD_NAMES else None
        avro = avro_of.get(target.name, technical)  # None: not the schema's column
        if avro is not None and avro in payload.column_names:
            columns.append(payload.column(avro).cast(target.type))
        else:
            columns.append(pa.nulls(payload.num_rows, target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _arrow_schema(info: TableInfo) -> pa.Schema:
    """The table's columns as an Arrow schema (Spark's Arrow types)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.schema([pa.field(name, to_arrow_type(dtype)) for name, dtype in info.columns.items()])


def _plain(info: TableInfo) -> bool:
    """True when every payload column has a plain type (no struct, array or map).

    fastavro names a nested record's fields by their Avro names, the table by the original
    ones: such tables are Spark's (the technical maps hold text only).
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    nested = (ArrayType, MapType, StructType)
    return not any(
        isinstance(dtype, nested)
        for name, dtype in info.columns.items()
        if name not in TECHNICAL_FIELD_NAMES
    )


def _check_key(
    key: bytes | None,
    value: dict[str, Any],
    keys: list[tuple[KeySchemaRef, Any, Any]],
    where: str,
) -> None:
    """:class:`NotDecoded` unless the row's key agrees with its value (Spark's says why)."""
    from fastavro import schemaless_reader

    found = next((k for k in keys if key is not None and key.startswith(k[0].header)), None)
    if found is None:
        raise NotDecoded(f"a Kafka key is missing or of an unknown writer schema ({where})")
    ref, pairs, parsed = found
    assert key is not None
    if isinstance(pairs, str):
        raise NotDecoded(pairs)
    try:
        decoded: Any = schemaless_reader(io.BytesIO(key[len(ref.header) :]), parsed, None)
    except Exception as exc:
        raise NotDecoded(f"a Kafka key does not decode ({where})") from exc
    for key_field, value_field in pairs:
        part = decoded.get(key_field.avro_name) if isinstance(decoded, dict) else None
        if part is None or part != value.get(value_field.avro_name):
            raise NotDecoded(f"a Kafka key disagrees with its value ({where})")


def _after(framed: pa.Array, skip: int) -> pa.Array:
    """``framed`` without its first ``skip`` bytes (its header).

    With an explicit end: pyarrow 26's ``binary_slice`` fails on a slice of an array (a
    table's rows of a batch) when the end is left open.
    """
    return pc.binary_slice(framed, skip, _NO_END)


def _first(mask: pa.Array | pa.ChunkedArray) -> int | None:
    """The first row where ``mask`` is true; None: none."""
    found = pc.index(mask, True).as_py()
    return None if found < 0 else found
