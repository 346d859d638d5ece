"""Value and key schemas of a table, with governance metadata as Avro schema properties.

A :class:`ValueSchema` is the Avro record of a table's change rows: the payload fields in the
order added, then the technical fields (:data:`TECHNICAL_FIELDS`). Field names are the
original source names; the Avro schema holds ``encode_name(name)`` and, where that differs,
the original as the field property ``sourceName``.

Record-level properties of the schema JSON (all optional except ``primaryKeys``)::

    doc                    table comment
    sourceName             original table name, when the Avro name had to be encoded
    sourceNamespace        original namespace, when it had to be encoded
    primaryKeys            ["ORIGINAL", "NAMES"] in key order ([] = append-only table)
    truncateText           true: over-length VARCHAR/NVARCHAR text is truncated (counted),
                           not refused (only present when set; also on the key schema)
    foreignKeys            [{"columns": [...], "refNamespace": ..., "refTable": ...,
                             "refColumns": [...]}]
    dataProductOwnerEmail  repoUrl  sourceSystemUri  ticketsUrl
    retentionPeriod        ISO 8601 duration, e.g. "P30D"
    deletionPolicy         free text, e.g. "delete-after-retention"
    dataClassification     classification of the whole table
    history                "scd2": the lakehouse table keeps every version of a key
                           (producer_lib/schema/_layout.py); only present when set
    expectations           [{"name": ..., "sql": ..., "action": "warn"|"drop"|"fail",
                             "column": ...}]: rules the producer checks before producing
                           (producer_lib/schema/expectations.py); only present when declared

Field-level: ``doc`` (column comment), ``sourceName``, ``dataClassification``. Metadata always
names columns by their original names: that is what the lakehouse table uses, and a foreign
key can only name another table's columns that way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from producer_lib.errors import SchemaError
from producer_lib.schema._governance import (
    CLASSIFICATION,
    GOVERNANCE_PROPERTIES,
    GovernanceMixin,
)
from producer_lib.schema._keys import ForeignKey, KeysMixin
from producer_lib.schema._layout import LayoutMixin
from producer_lib.schema.expectations import Expectation, ExpectationsMixin
from producer_lib.schema.names import decode_name, encode_name, is_valid_avro_name
from producer_lib.schema.types import (
    AvroField,
    AvroMap,
    AvroString,
    AvroTimestampMicros,
    AvroType,
)

TECHNICAL_FIELDS: tuple[AvroField, ...] = (
    AvroField("__change_type", AvroString(), nullable=False),  # one RowType code
    AvroField("__change_time", AvroTimestampMicros(), nullable=False),  # transaction time
    AvroField("__source_system", AvroString(), nullable=False),
    AvroField("__source_transaction", AvroString()),
    AvroField("__source_rowid", AvroString()),
    AvroField("__truncate", AvroMap(AvroString(), values_nullable=True)),  # TRUNCATE scope
    AvroField("__audit", AvroMap(AvroString())),
    AvroField("__extension", AvroMap(AvroString())),
)
"""Appended to every value schema, in this order."""

TECHNICAL_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in TECHNICAL_FIELDS)
_RECORD_KEYS = {"type", "name", "namespace", "doc", "fields", "sourceName", "sourceNamespace"}
_KNOWN_PROPS = _RECORD_KEYS | {
    "primaryKeys",
    "foreignKeys",
    "truncateText",
    "clusterBy",
    "history",
    "expectations",
    *GOVERNANCE_PROPERTIES,
}


def _encode_namespace(namespace: str) -> str:
    return ".".join(encode_name(part) for part in namespace.split("."))


def _record_header(name: str, namespace: str, doc: str | None) -> dict[str, Any]:
    header: dict[str, Any] = {"type": "record", "name": encode_name(name)}
    header["namespace"] = _encode_namespace(namespace)
    if doc is not None:
        header["doc"] = doc
    if header["name"] != name:
        header["sourceName"] = name
    if header["namespace"] != namespace:
        header["sourceNamespace"] = namespace
    return header


class ValueSchema(KeysMixin, GovernanceMixin, LayoutMixin, ExpectationsMixin):
    """The value schema of one table: payload fields, keys, comments and governance metadata.

    Text longer than its ``AvroVarchar``/``AvroNVarchar`` length is refused when encoded (an
    EncodeError naming table, column, row and key). To cut it to length instead, opt in per
    column with ``AvroNVarchar(n, truncate=True)`` or for the whole table with
    ``truncate_text=True`` (the attribute of the same name, written to the schema as
    ``"truncateText": true``); each cut value is then counted per column by the encoder
    (``AvroEncoder.truncations``).

    Args:
        name: Table name as the source spells it.
        namespace: Namespace (schema, source system); dot-separated parts.
        doc: Table comment.
        truncate_text: Truncate over-length text of every column instead of refusing it.

    Example:
        >>> schema = ValueSchema("SAMPLE_PLAN", "LABWARE")
        >>> schema.add_field("ID", AvroLong(), nullable=False)
        >>> schema.add_primary_key("ID")  # or: schema.pks = ["ID"]
        >>> schema.set_data_product_owner_email("owner@example.com")
        >>> schema.expect('"ID" > 0', name="id_positive", action="drop")
    """

    def __init__(
        self, name: str, namespace: str, doc: str | None = None, *, truncate_text: bool = False
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.doc = doc
        self.truncate_text = truncate_text
        """Truncate over-length VARCHAR/NVARCHAR text of every column (counted), not refuse."""
        _encode_namespace(namespace)  # fail early on empty parts
        encode_name(name)
        self._fields: dict[str, AvroField] = {}
        self._folded: dict[str, str] = {}  # casefolded original name -> name
        self._folded_avro: dict[str, str] = {}  # casefolded Avro name -> name
        self._pks: list[str] = []
        self._fks: list[ForeignKey] = []
        self._governance: dict[str, str] = {}
        self._classifications: dict[str, str] = {}
        self._cluster_by: list[str] = []
        self._history: str | None = None
        self._expectations: dict[str, Expectation] = {}
        self.properties: dict[str, Any] = {}
        """Further record-level properties, kept as they are."""

    # -- fields ---------------------------------------------------------------------------

    def add_field(
        self, name: str, avro_type: AvroType, doc: str | None = None, nullable: bool = True
    ) -> AvroField:
        """Append a payload field.

        Args:
            name: Original column name; encoded for Avro where needed.
            avro_type: The column's type, e.g. ``AvroDecimal(10, 2)``.
            doc: Column comment.
            nullable: Whether the column may be null.

        Returns:
            The added field.

        Raises:
            SchemaError: The name is empty, starts with ``__``, or clashes with another field
                (Spark and Delta compare names case-insensitively).
        """
        if isinstance(avro_type, type) and issubclass(avro_type, AvroType):
            avro_type = avro_type()  # AvroInt for AvroInt(): a common slip
        if not isinstance(avro_type, AvroType):
            raise SchemaError("Not an Avro type", table=self.name, column=name, type=avro_type)
        if not name or name.startswith("__"):
            raise SchemaError(
                "Column names must be non-empty and not start with '__' (technical fields)",
                table=self.name,
                column=name,
            )
        new = AvroField(name, avro_type, nullable, doc)
        for folded, key in ((self._folded, name), (self._folded_avro, new.avro_name)):
            if key.casefold() in folded:
                raise SchemaError(
                    "Duplicate column (Spark and Delta compare names case-insensitively)",
                    table=self.name,
                    column=name,
                    clashes_with=folded[key.casefold()],
                )
        self._folded[name.casefold()] = name
        self._folded_avro[new.avro_name.casefold()] = name
        self._fields[name] = new
        return new

    @property
    def fields(self) -> Mapping[str, AvroField]:
        """Payload fields by original name, in schema order (read-only)."""
        return MappingProxyType(self._fields)

    def field(self, name: str) -> AvroField:
        """Return the payload field ``name`` (original name).

        Raises:
            SchemaError: No such column.
        """
        try:
            return self._fields[name]
        except KeyError:
            raise SchemaError("No such column", table=self.name, column=name) from None

    def set_column_comment(self, column: str, comment: str | None) -> None:
        """Set (or with ``None`` clear) the comment of ``column``."""
        old = self.field(column)
        self._fields[column] = AvroField(old.name, old.type, old.nullable, comment, old.properties)

    def set_table_comment(self, comment: str | None) -> None:
        """Set (or with ``None`` clear) the table comment (Avro ``doc``)."""
        self.doc = comment

    # -- Avro and Arrow -------------------------------------------------------------------

    def _payload_avro(self) -> list[dict[str, Any]]:
        result = []
        for item in self._fields.values():
            avro = item.to_avro()
            if item.name in self._classifications:
                avro[CLASSIFICATION] = self._classifications[item.name]
            result.append(avro)
        return result

    def to_avro_json(self) -> dict[str, Any]:
        """Return the Avro schema as a dict (payload + technical fields + properties)."""
        schema = _record_header(self.name, self.namespace, self.doc)
        schema["primaryKeys"] = list(self._pks)
        if self.truncate_text:
            schema["truncateText"] = True
        if self._fks:
            schema["foreignKeys"] = [fk.to_json() for fk in self._fks]
        if self._cluster_by:
            schema["clusterBy"] = list(self._cluster_by)
        if self._history is not None:
            if not self._pks:
                raise SchemaError(
                    f"history {self._history!r} needs a primary key: a version is of a key",
                    table=self.name,
                )
            schema["history"] = self._history
        if self._expectations:
            schema["expectations"] = [e.to_json() for e in self._expectations.values()]
        schema.update(
            {key: self._governance[key] for key in GOVERNANCE_PROPERTIES if key in self._governance}
        )
        schema.update(self.properties)
        schema["fields"] = self._payload_avro() + [f.to_avro() for f in TECHNICAL_FIELDS]
        return schema

    def to_json(self) -> str:
        """Return the Avro schema as a JSON string."""
        return json.dumps(self.to_avro_json(), ensure_ascii=False)

    @property
    def full_name(self) -> str:
        """The Avro full name ``namespace.name`` (encoded), e.g. for registry subjects."""
        return f"{_encode_namespace(self.namespace)}.{encode_name(self.name)}"

    def get_pyarrow(self, technical: bool = True) -> pa.Schema:
        """Return the Arrow schema: original names, payload then (optionally) technical fields."""
        fields: Iterable[AvroField] = self._fields.values()
        if technical:
            fields = [*fields, *TECHNICAL_FIELDS]
        return pa.schema([pa.field(f.name, f.type.to_pyarrow(), f.nullable) for f in fields])

    @classmethod
    def from_avro_json(cls, data: Mapping[str, Any] | str) -> ValueSchema:
        """Rebuild a schema from :meth:`to_avro_json` / :meth:`to_json` output.

        Raises:
            SchemaError: Not a value schema (not a record, technical fields missing or
                changed, unsupported types).
        """
        raw: Mapping[str, Any] = json.loads(data) if isinstance(data, str) else data
        if raw.get("type") != "record" or not is_valid_avro_name(str(raw.get("name"))):
            raise SchemaError("Not an Avro record schema", schema=str(raw)[:200])
        name = raw.get("sourceName") or decode_name(raw["name"])
        namespace = raw.get("sourceNamespace") or ".".join(
            decode_name(part) for part in str(raw.get("namespace", "")).split(".")
        )
        schema = cls(name, namespace, raw.get("doc"))
        payload = _split_technical(raw["fields"], table=name)
        for item in payload:
            parsed = AvroField.from_avro(item)
            schema.add_field(parsed.name, parsed.type, parsed.doc, parsed.nullable)
            schema._restore_field_properties(parsed)
        schema._restore_record_properties(raw)
        return schema

    def _restore_field_properties(self, parsed: AvroField) -> None:
        props = dict(parsed.properties)
        if CLASSIFICATION in props:
            self.set_data_classification(parsed.name, props.pop(CLASSIFICATION))
        self._fields[parsed.name] = AvroField(
            parsed.name, parsed.type, parsed.nullable, parsed.doc, props
        )

    def _restore_record_properties(self, raw: Mapping[str, Any]) -> None:
        self.set_primary_keys(*raw.get("primaryKeys", ()))
        self.truncate_text = raw.get("truncateText") is True
        for fk in raw.get("foreignKeys", ()):
            self.add_foreign_key(
                fk["columns"], fk["refNamespace"], fk["refTable"], fk["refColumns"]
            )
        self._governance.update({k: raw[k] for k in GOVERNANCE_PROPERTIES if k in raw})
        self.set_cluster_columns(*raw.get("clusterBy", ()))
        self.set_history(raw.get("history"))
        self._restore_expectations(raw.get("expectations", []))
        self.properties.update({k: v for k, v in raw.items() if k not in _KNOWN_PROPS})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValueSchema):
            return NotImplemented
        return self.to_avro_json() == other.to_avro_json()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"ValueSchema({self.name!r}, {self.namespace!r}, fields={list(self._fields)!r})"


def _split_technical(fields: Sequence[Mapping[str, Any]], table: str) -> list[Mapping[str, Any]]:
    count = len(TECHNICAL_FIELDS)
    technical = [dict(item) for item in fields[-count:]]
    if technical != [f.to_avro() for f in TECHNICAL_FIELDS]:
        raise SchemaError(
            "Not a value schema: the technical fields (__change_type ... __extension) must "
            "end the record exactly as TECHNICAL_FIELDS defines them",
            table=table,
        )
    return list(fields[:-count])


@dataclass(frozen=True)
class KeySchema:
    """The Kafka key schema of a table: its primary key fields, in key order, not null.

    A table without primary key is append-only; its key holds only ``__change_time``, the
    transaction time (timestamp-micros).

    Args:
        value_schema: The table's value schema; its primary key is read once, here.
    """

    value_schema: ValueSchema
    fields: tuple[AvroField, ...] = field(init=False)

    def __post_init__(self) -> None:
        pks = [self.value_schema.field(name) for name in self.value_schema.pks]
        key_fields = tuple(AvroField(f.name, f.type, False, f.doc) for f in pks) or (
            AvroField("__change_time", AvroTimestampMicros(), nullable=False),
        )
        object.__setattr__(self, "fields", key_fields)

    @property
    def name(self) -> str:
        """Record name: ``<table>_key``."""
        return f"{self.value_schema.name}_key"

    @property
    def is_append_only(self) -> bool:
        """True when the table has no primary key (key = transaction time only)."""
        return not self.value_schema.pks

    @property
    def field_names(self) -> tuple[str, ...]:
        """Key field names (original names), in key order."""
        return tuple(f.name for f in self.fields)

    def to_avro_json(self) -> dict[str, Any]:
        """Return the key's Avro schema as a dict."""
        schema = _record_header(self.name, self.value_schema.namespace, None)
        schema["primaryKeys"] = list(self.value_schema.pks)
        if self.value_schema.truncate_text:
            schema["truncateText"] = True  # a key column is cut as its value column is
        schema["fields"] = [f.to_avro() for f in self.fields]
        return schema

    def to_json(self) -> str:
        """Return the key's Avro schema as a JSON string."""
        return json.dumps(self.to_avro_json(), ensure_ascii=False)

    def get_pyarrow(self) -> pa.Schema:
        """Return the key's Arrow schema (original names, not null)."""
        return pa.schema([pa.field(f.name, f.type.to_pyarrow(), False) for f in self.fields])
