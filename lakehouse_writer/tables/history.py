"""The columns of a history table (SCD type 2), and the property that marks one.

A value schema that asks for history (``ValueSchema.set_history("scd2")``) gets a table of
one row per version of a key: the payload and technical columns, then

- ``__valid_from``: the change time the version took effect (its ``__change_time``; an
  ARCHIVE's version, its own);
- ``__valid_to``: the change time it stopped being valid — the next change of its key, its
  DELETE, or a TRUNCATE covering it; NULL while it is current;
- ``__is_current``: ``__valid_to`` IS NULL, for readers that want today's rows.

A version is identified by its key and ``__valid_from``. How a batch's rows become versions is
:mod:`lakehouse_writer.rules.history`.
"""

from __future__ import annotations

from producer_lib.schema.types import AvroBoolean, AvroField, AvroTimestampMicros

__all__ = [
    "HISTORY_COLUMNS",
    "HISTORY_FIELDS",
    "HISTORY_PROPERTY",
    "IS_CURRENT",
    "VALID_FROM",
    "VALID_TO",
]

HISTORY_PROPERTY = "flow.history"  # the table property: the history the table keeps ("scd2")
VALID_FROM = "__valid_from"
VALID_TO = "__valid_to"
IS_CURRENT = "__is_current"
HISTORY_FIELDS: tuple[AvroField, ...] = (
    AvroField(VALID_FROM, AvroTimestampMicros(), nullable=False),
    AvroField(VALID_TO, AvroTimestampMicros()),
    AvroField(IS_CURRENT, AvroBoolean(), nullable=False),
)
"""Appended to a history table's columns, after the technical fields."""
HISTORY_COLUMNS = frozenset(f.name for f in HISTORY_FIELDS)
