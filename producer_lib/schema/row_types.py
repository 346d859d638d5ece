"""Row types (the ``__change_type`` code) and helpers that build special rows.

Rows are plain dicts keyed by original column names, plus technical fields such as
``__change_type``. The producer fills ``__change_time``, ``__source_system`` and the other
technical fields it owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import Any

from producer_lib.errors import SchemaError
from producer_lib.schema.value_schema import KeySchema, ValueSchema


class RowType(StrEnum):
    """What a change row does to the lakehouse table; the value is the one-character code.

    Attributes:
        INSERT: ``I`` new row; applied as an upsert (a replay must not fail).
        UPDATE: ``U`` full after-image; upsert.
        UPSERT: ``A`` insert or overwrite.
        REPLACE: ``R`` a row of a reload that began with a TRUNCATE; upsert (append where
            the table has no key).
        BEFORE: ``B`` before-image of an update; only acted on when the update moved the
            primary key (the old key is deleted).
        DELETE: ``D`` delete by primary key; the payload is the last image.
        EXTERMINATE: ``X`` delete by primary key; only key fields are set.
        GDPR: ``G`` delete by primary key and make sure no current data file still holds the
            row.
        ARCHIVE: ``P`` keep the row, mark it archived.
        TRUNCATE: ``T`` delete every row in scope (all, or those matching ``__truncate``)
            whose ``__change_time`` is earlier than this row's.
    """

    INSERT = "I"
    UPDATE = "U"
    UPSERT = "A"
    REPLACE = "R"
    BEFORE = "B"
    DELETE = "D"
    EXTERMINATE = "X"
    GDPR = "G"
    ARCHIVE = "P"
    TRUNCATE = "T"


def _scope_text(value: Any) -> str | None:
    """Render a scope value the way Spark casts strings back (ISO dates, lower-case bools)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return str(value)


# A TRUNCATE carries no payload, but Avro cannot encode null in a non-nullable field (a key
# field among them). Such fields get a neutral value of their type; the writer never reads the
# payload of a TRUNCATE, only `__truncate` and `__change_time`.
_PLACEHOLDER_BY_BASE: dict[str, Any] = {
    "boolean": False,
    "int": 0,
    "long": 0,
    "float": 0.0,
    "double": 0.0,
    "string": "",
    "bytes": b"",
    "array": [],
    "map": {},
}
_PLACEHOLDER_BY_LOGICAL: dict[str, Any] = {
    "decimal": Decimal(0),
    "date": date(1970, 1, 1),
    "time-millis": time(0),
    "time-micros": time(0),
    "timestamp-millis": datetime(1970, 1, 1, tzinfo=UTC),
    "timestamp-micros": datetime(1970, 1, 1, tzinfo=UTC),
    "uuid": "00000000-0000-0000-0000-000000000000",
}


def placeholder_value(avro: Any) -> Any:
    """A neutral value of an Avro type (its JSON form): 0, "", epoch, ..., None if nullable."""
    if isinstance(avro, list):  # a union: nullable fields are null
        return None if "null" in avro else placeholder_value(avro[0])
    if isinstance(avro, str):
        return _PLACEHOLDER_BY_BASE.get(avro)
    if avro.get("logicalType") in _PLACEHOLDER_BY_LOGICAL:
        return _PLACEHOLDER_BY_LOGICAL[avro["logicalType"]]
    if avro["type"] == "record":
        return {
            f.get("sourceName", f["name"]): placeholder_value(f["type"]) for f in avro["fields"]
        }
    return (
        placeholder_value(avro["type"])
        if avro["type"] not in ("array", "map")
        else (_PLACEHOLDER_BY_BASE[avro["type"]])
    )


def create_truncate_row(schema: ValueSchema, scope: Mapping[str, Any] | None) -> dict[str, Any]:
    """Build the value row of a TRUNCATE.

    Args:
        schema: The table's value schema.
        scope: ``None`` (or empty) to truncate the whole table, else ``{column: value}``:
            only rows where every listed column equals its value are deleted. Values are
            sent as text (``__truncate`` is a map of string to string); ``None`` matches
            NULL.

    Returns:
        ``{column: None for every nullable payload column (a neutral value such as 0, ""
        or the epoch for non-nullable ones, key columns among them: Avro has no null there),
        "__change_type": "T", "__truncate": {column: text} or None}``.

    Raises:
        SchemaError: A scope column does not exist.
    """
    keys = set(schema.pks)  # key fields are never null on the wire, nullable or not here
    row: dict[str, Any] = {
        name: None
        if field.nullable and name not in keys
        else placeholder_value(field.type.to_avro())
        for name, field in schema.fields.items()
    }
    for column in scope or {}:
        schema.field(column)
    row["__change_type"] = RowType.TRUNCATE.value
    row["__truncate"] = (
        {column: _scope_text(value) for column, value in scope.items()} if scope else None
    )
    return row


def create_key_row(row: Mapping[str, Any], key_schema: KeySchema) -> dict[str, Any]:
    """Take the key of ``row``: its primary key fields, in key order.

    For an append-only table the key is ``{"__change_time": row.get("__change_time")}``;
    ``None`` there means the producer fills in the transaction time.

    Raises:
        SchemaError: ``row`` lacks a key column.
    """
    if key_schema.is_append_only:
        return {"__change_time": row.get("__change_time")}
    missing = [name for name in key_schema.field_names if name not in row]
    if missing:
        raise SchemaError(
            "Row lacks primary key columns", table=key_schema.value_schema.name, columns=missing
        )
    return {name: row[name] for name in key_schema.field_names}
