"""Readers: load a source system into a DuckDB staging table and describe it.

Quickstart::

    from producer_lib.sources import DuckDBReader

    async with DuckDBReader(logger) as reader:
        await reader.load("SAMPLE_PLAN", "select * from 'plans.parquet'", "LABWARE", "LABWARE")
        reader.table_schema.set_data_product_owner_email("owner@example.com")

Every reader is a :class:`SourceAdapter`: ``load(table, sql, namespace, source_system)``
derives the schema from the SQL projection, adds keys and comments from the data dictionary
(best effort), stages the rows in DuckDB (DuckDB's default connection unless one is passed)
and checks the primary key. ``PostgresReader``, ``OracleReader`` and ``RestReader`` import
their client libraries (psycopg, oracledb, aiohttp) only when used. ``KafkaJsonReader`` and
``JsonLinesReader`` stage JSON events (a topic, or JSON-lines files) with declared columns.
``load_changes`` stages a Delta table's changes since a version (its change data feed).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from producer_lib.schema.rows import rows_to_arrow
from producer_lib.sources.adapter import SourceAdapter
from producer_lib.sources.delta_changes import (
    ChangesExpiredError,
    DeltaChanges,
    load_changes,
    net_images,
)
from producer_lib.sources.dictionary import DataDictionary, SourceTable, apply_dictionary
from producer_lib.sources.duckdb_reader import DuckDBReader
from producer_lib.sources.json_events import JsonColumns, JsonLinesReader, KafkaJsonReader

if TYPE_CHECKING:
    from producer_lib.sources.oracle import OracleReader
    from producer_lib.sources.postgres import PostgresReader
    from producer_lib.sources.rest import RestReader

_LAZY = {  # reader -> (module, the extra that installs its client library)
    "OracleReader": ("producer_lib.sources.oracle", "oracle"),
    "PostgresReader": ("producer_lib.sources.postgres", "postgres"),
    "RestReader": ("producer_lib.sources.rest", "rest"),
}

__all__ = [
    "ChangesExpiredError",
    "DataDictionary",
    "DeltaChanges",
    "DuckDBReader",
    "JsonColumns",
    "JsonLinesReader",
    "KafkaJsonReader",
    "OracleReader",
    "PostgresReader",
    "RestReader",
    "SourceAdapter",
    "SourceTable",
    "apply_dictionary",
    "load_changes",
    "net_images",
    "rows_to_arrow",
]


def __getattr__(name: str) -> Any:
    """Import a reader with an optional client library on first use."""
    if name in _LAZY:
        module, extra = _LAZY[name]
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"{name} needs {exc.name}: pip install 'flow-platform[{extra}]'", name=exc.name
            ) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
