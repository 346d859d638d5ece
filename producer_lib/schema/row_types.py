"""Row types (the ``__change_type`` code) and helpers that build special rows.

Rows are plain dicts keyed by original column names, plus technical fields such as
``__change_type``. The producer fills ``__change_time``, ``__source_system`` and the other
technical fields it owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
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


def create_truncate_row(schema: ValueSchema, scope: Mapping[str, Any] | None) -> dict[str, Any]:
    """Build the value row of a TRUNCATE.

    Args:
        schema: The table's value schema.
        scope: ``None`` (or empty) to truncate the whole table, else ``{column: value}``:
            only rows where every listed column equals its value are deleted. Values are
            sent as text (``__truncate`` is a map of string to string); ``None`` matches
            NULL.

    Returns:
        ``{column: None for every payload column, "__change_type": "T",
        "__truncate": {column: text} or None}``.

    Raises:
        SchemaError: A scope column does not exist.
    """
    row: dict[str, Any] = dict.fromkeys(schema.fields)
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
