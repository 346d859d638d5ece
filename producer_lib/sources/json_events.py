"""JSON events into DuckDB with a declared schema: from a Kafka topic or from JSON-lines files.

For flows that republish events as change rows. The schema is declared (column names and
DuckDB types), never guessed from the data::

    columns = {"order_id": "BIGINT", "status": "VARCHAR", "amount": "DECIMAL(12,2)",
               "changed_at": "TIMESTAMPTZ"}

    async with KafkaJsonReader(columns, KafkaSettings(), logger, group_id="orders-flow") as reader:
        await reader.load("ORDER_EVENTS", "shop.order-events", "SHOP", "SHOP")
        ...  # produce the change rows, producer.commit()
        reader.commit_offsets()  # the next run starts after what this one published

    async with JsonLinesReader(columns, logger) as reader:
        await reader.load("ORDER_EVENTS", "/data/events/*.jsonl", "SHOP", "SHOP")

Each event is a JSON object; its fields fill the declared columns by name (other fields are
ignored). A field that is missing or ``null`` is NULL. A value that does not fit its column's
type is an error naming the topic, partition and offset (or the file and line) and the column:
text that is no number where a number belongs (``"42"`` is 42), a fraction for an integer,
more decimal places than a DECIMAL's scale, a number for a BOOLEAN, a string for a list or a
STRUCT, a STRUCT field that is missing or does not fit (nested values convert strictly). A
VARCHAR column takes any JSON value, as its text. An event that is not a JSON object (a
tombstone, bad JSON, invalid UTF-8) is an error too. No event is dropped silently.

The topic is read with a ``read_committed`` consumer, from given offsets, from a timestamp or
from the consumer group's committed offsets, up to the end offsets seen when the load starts
(:class:`~producer_lib.sources.topic_range.TopicRange`); messages go to DuckDB in Arrow
batches and are parsed there. Files are read by DuckDB's ``read_json`` (``columns=``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema, value_schema_from_describe
from producer_lib.settings import KafkaSettings
from producer_lib.sources.adapter import SourceAdapter
from producer_lib.sources.topic_range import TopicRange
from producer_lib.sql_text import quote_ident, quote_literal
from producer_lib.staging import quote_table
from producer_lib.staging.duckdb_stage import column_list

_names = itertools.count()
_DUCKDB_FILE = re.compile(r'in file "([^"]+)"')
_EXACT_NUMBER = re.compile(r"(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?|DECIMAL\(\d+,\d+\))")
_BOOLEAN = "BOOLEAN"
_NUMBER_JSON = "('BIGINT', 'UBIGINT', 'DOUBLE')"  # json_type() of JSON numbers


@dataclass(frozen=True)
class JsonColumns:
    """The declared columns of the events: names and DuckDB types, in order.

    Attributes:
        columns: ``(name, DuckDB type)`` pairs; types as DuckDB spells them canonically.
        primary_key: Key columns of the staged table (checked after the load), or none.
    """

    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...] = ()

    @classmethod
    def declare(
        cls,
        columns: Mapping[str, str],
        primary_key: Sequence[str] = (),
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> JsonColumns:
        """Check ``columns`` (name -> DuckDB type) with DuckDB and return them canonical.

        Raises:
            SourceError: No columns, a type DuckDB does not know, or a key column that is
                not declared (names the column).
        """
        if not columns:
            raise SourceError("Declare at least one column of the JSON events")
        conn = connection or duckdb.connect()
        canonical = []
        for name, type_text in columns.items():
            try:
                row = conn.execute(f"SELECT typeof(CAST(NULL AS {type_text}))").fetchone()
            except duckdb.Error as exc:
                raise SourceError(
                    f"Not a DuckDB type: {exc}", column=name, duckdb_type=type_text
                ) from exc
            canonical.append((name, str(row[0]) if row else type_text))
        missing = [key for key in primary_key if key not in columns]
        if missing:
            raise SourceError("A key column is not declared", column=missing[0])
        return cls(tuple(canonical), tuple(primary_key))

    def value_schema(self, name: str, namespace: str) -> ValueSchema:
        """The value schema of the staged events (key columns not nullable)."""
        rows = [(c, t, c not in self.primary_key) for c, t in self.columns]
        schema = value_schema_from_describe(name, namespace, rows)
        if self.primary_key:
            schema.add_primary_key(*self.primary_key)
        return schema

    def structure(self) -> str:
        """``json_transform`` structure that pulls each column's field out as raw JSON."""
        return json.dumps({name: "JSON" for name, _ in self.columns})

    def typed_select(self, raw: str, locators: Sequence[str]) -> str:
        """SQL over ``raw`` (locators + one JSON column per declared column): typed values.

        Each column ``c`` keeps its raw JSON as ``c__raw`` next to the typed ``c``, which is
        NULL when the value does not convert (``TRY`` of the strict transform).
        """
        parts = [quote_ident(locator) for locator in locators]
        for name, duck_type in self.columns:
            raw_col = quote_ident(name)
            target = quote_literal(json.dumps(duck_type))
            parts.append(f"{raw_col} AS {quote_ident(name + '__raw')}")
            parts.append(f"TRY(json_transform_strict({raw_col}, {target})) AS {raw_col}")
        return f"SELECT {', '.join(parts)} FROM {raw}"

    def misfit(self, name: str, duck_type: str) -> str:
        """SQL condition: column ``name``'s raw value is present but does not fit its type."""
        raw, typed = quote_ident(name + "__raw"), quote_ident(name)
        bad = [f"{typed} IS NULL"]
        if _EXACT_NUMBER.fullmatch(duck_type.replace(" ", "")):  # no rounding, no booleans
            bad.append(f"json_type({raw}) NOT IN {_NUMBER_JSON} AND json_type({raw}) <> 'VARCHAR'")
            bad.append(
                f"TRY_CAST(json_extract_string({raw}, '$') AS DOUBLE) IS DISTINCT FROM "
                f"CAST({typed} AS DOUBLE)"
            )
        elif duck_type == _BOOLEAN:
            bad.append(f"json_type({raw}) IN {_NUMBER_JSON}")
        return f"({raw} IS NOT NULL AND ({' OR '.join(bad)}))"

    def first_misfit(self, typed: str, locators: Sequence[str]) -> str:
        """SQL: locators, column name and raw values of the first row with a misfit value."""
        misfits = [(name, self.misfit(name, duck_type)) for name, duck_type in self.columns]
        cases = " ".join(f"WHEN {test} THEN {quote_literal(name)}" for name, test in misfits)
        raws = ", ".join(quote_ident(name + "__raw") for name, _ in self.columns)
        return (
            f"SELECT {column_list(locators)}, CASE {cases} END, [{raws}] FROM {typed} "
            f"WHERE {' OR '.join(test for _, test in misfits)} "
            f"ORDER BY {column_list(locators)} LIMIT 1"
        )


class _JsonEventsReader(SourceAdapter):
    """What both JSON readers share: the declared schema, and staging with validation."""

    sql_dialect = None  # a topic or files, not SQL: no lineage

    def __init__(
        self,
        columns: Mapping[str, str] | JsonColumns,
        logger: logging.Logger | None = None,
        *,
        primary_key: Sequence[str] = (),
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        super().__init__(logger, connection=connection)
        self.columns = (
            columns
            if isinstance(columns, JsonColumns)
            else JsonColumns.declare(columns, primary_key, self.connection)
        )

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        return self.columns.value_schema(name, namespace)

    def _stage(
        self, duckdb_table: str, raw: str, locators: Mapping[str, str], where: dict[str, str]
    ) -> int:
        """Type the rows of the relation ``raw``, check every value, append them; return count.

        Call holding the connection's lock (see :meth:`SourceAdapter.run_locked`).

        Args:
            duckdb_table: The staging table.
            raw: A relation of locator columns and one JSON column per declared column.
            locators: Locator column -> its name in errors (``{"offset": "offset"}``).
            where: Context of errors (``{"topic": ...}``).

        Raises:
            SourceError: A value does not fit its column, with ``where``, the row's locators,
                the column, its type and the value's JSON type.
        """
        typed = self._typed(raw, locators)
        try:
            error = self._misfit(typed, locators, where)
            if error is not None:
                raise error
            names = column_list(name for name, _ in self.columns.columns)
            self.connection.execute(
                f"INSERT INTO {quote_table(duckdb_table)} ({names}) SELECT {names} FROM {typed}"
            )
            result = self.connection.execute(f"SELECT count(*) FROM {typed}").fetchone()
            return int(result[0]) if result else 0
        finally:
            self.connection.execute(f"DROP TABLE IF EXISTS {typed}")

    def _typed(self, raw: str, locators: Mapping[str, str]) -> str:
        """Materialise the typed rows of ``raw`` in a temporary table; return its name.

        ``raw`` is materialised first: the typed query reads each raw column twice, and an
        inlined ``raw`` would parse every event again for each reference (about 3x slower).
        """
        number = next(_names)
        raw_table, typed = f"__json_raw_{number}", f"__json_typed_{number}"
        self.connection.execute(f"CREATE TEMP TABLE {raw_table} AS SELECT * FROM {raw}")
        try:
            select = self.columns.typed_select(raw_table, list(locators))
            self.connection.execute(f"CREATE TEMP TABLE {typed} AS {select}")
        finally:
            self.connection.execute(f"DROP TABLE IF EXISTS {raw_table}")
        return typed

    def _misfit(
        self, typed: str, locators: Mapping[str, str], where: dict[str, str]
    ) -> SourceError | None:
        """The error for the first value of ``typed`` that does not fit, or None."""
        bad = self.connection.execute(self.columns.first_misfit(typed, list(locators))).fetchone()
        if bad is None:
            return None
        located = dict(zip(locators.values(), bad[: len(locators)], strict=True))
        column, raws = bad[len(locators)], bad[len(locators) + 1]
        index = [name for name, _ in self.columns.columns].index(column)
        found = self.connection.execute("SELECT json_type(?::JSON)", [raws[index]]).fetchone()
        return SourceError(
            "A JSON value does not fit its column",
            **where,
            **located,
            column=column,
            duckdb_type=self.columns.columns[index][1],
            json_type=found[0] if found else None,
        )


class KafkaJsonReader(_JsonEventsReader):
    """Loads JSON events from a Kafka topic (``load``'s second argument is the topic).

    Args:
        columns: Column name -> DuckDB type, or a :class:`JsonColumns`.
        settings: How to reach Kafka.
        logger: Where progress goes.
        group_id: Consumer group: its committed offsets are the default start, and
            :meth:`commit_offsets` advances them. None: no group (give a start, or read all).
        start_offsets: Start offset by partition (others start as by default).
        start_time: Start every partition at its first message at or after this instant.
        primary_key: Key columns of the staged table, or none (events often repeat a key).
        connection: The DuckDB staging database; default: DuckDB's default connection.
        batch_size: Messages per batch handed to DuckDB.
        idle_timeout_s: Longest wait for a message before a partition's end.
    """

    def __init__(
        self,
        columns: Mapping[str, str] | JsonColumns,
        settings: KafkaSettings,
        logger: logging.Logger | None = None,
        *,
        group_id: str | None = None,
        start_offsets: Mapping[int, int] | None = None,
        start_time: datetime | None = None,
        primary_key: Sequence[str] = (),
        connection: duckdb.DuckDBPyConnection | None = None,
        batch_size: int = 50_000,
        idle_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(columns, logger, primary_key=primary_key, connection=connection)
        self.settings, self.group_id = settings, group_id
        self._range_options: dict[str, Any] = {
            "group_id": group_id,
            "start_offsets": start_offsets,
            "start_time": start_time,
            "batch_size": batch_size,
            "idle_timeout_s": idle_timeout_s,
        }
        self.topic_range: TopicRange | None = None
        """The range the last load read (its ``starts`` and ``ends`` by partition)."""

    async def close(self) -> None:
        """Close the consumer of the last load."""
        if self.topic_range is not None:
            self.topic_range.close()
        await super().close()

    def commit_offsets(self) -> dict[int, int]:
        """Commit the last load's end offsets to ``group_id``; call after ``producer.commit()``.

        Raises:
            SourceError: Nothing was loaded yet, or the commit failed.
            ConfigError: No ``group_id``.
        """
        if self.topic_range is None:
            raise SourceError("No topic was loaded yet: call load() first")
        return self.topic_range.commit()

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        if self.topic_range is not None:
            self.topic_range.close()
        self.topic_range = TopicRange(self.settings, sql, **self._range_options)
        await asyncio.to_thread(self.topic_range.open)
        batches = self.topic_range.batches()
        fetch = asyncio.create_task(asyncio.to_thread(next, batches, None))
        try:
            while (batch := await fetch) is not None:  # DuckDB stages one, Kafka fetches the next
                fetch = asyncio.create_task(asyncio.to_thread(next, batches, None))
                rows = await self.run_locked(self._stage_batch, duckdb_table, sql, batch)
                self._progress[duckdb_table].add(rows)
        finally:  # a thread cannot be cancelled: let the fetch end before the consumer closes
            await asyncio.gather(fetch, return_exceptions=True)

    def _stage_batch(self, duckdb_table: str, topic: str, batch: pa.Table) -> int:
        view = f"__json_batch_{next(_names)}"
        self.connection.register(view, batch)
        try:
            self._check_objects(view, topic)
            raw = (
                f'(SELECT partition, "offset", unnest(json_transform(decode(value), '
                f"{quote_literal(self.columns.structure())})) FROM {view})"
            )
            locators = {"partition": "partition", "offset": "offset"}
            return self._stage(duckdb_table, raw, locators, {"topic": topic})
        finally:
            self.connection.unregister(view)

    def _check_objects(self, view: str, topic: str) -> None:
        """Fail on the first message that is not a JSON object (names its offset)."""
        bad = self.connection.execute(
            f'SELECT partition, "offset", value IS NULL FROM {view} WHERE value IS NULL '
            f"OR TRY(json_type(decode(value))) IS DISTINCT FROM 'OBJECT' "
            f'ORDER BY partition, "offset" LIMIT 1'
        ).fetchone()
        if bad is not None:
            what = "has no value (a tombstone)" if bad[2] else "is not a JSON object"
            raise SourceError(f"A message {what}", topic=topic, partition=bad[0], offset=bad[1])


class JsonLinesReader(_JsonEventsReader):
    """Loads JSON-lines files (``load``'s second argument: a path, a glob or a list of them).

    Args:
        columns: Column name -> DuckDB type, or a :class:`JsonColumns`.
        logger: Where progress goes.
        primary_key: Key columns of the staged table, or none.
        connection: The DuckDB staging database; default: DuckDB's default connection.
    """

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        rows = await self.run_locked(self._stage_files, duckdb_table, sql)
        self._progress[duckdb_table].add(rows)

    def _stage_files(self, duckdb_table: str, paths: str) -> int:
        columns = ", ".join(f"{quote_literal(name)}: 'JSON'" for name, _ in self.columns.columns)
        raw = (
            f"read_json({quote_literal(paths)}, format = 'newline_delimited', "
            f"columns = {{{columns}}}, filename = '__file')"
        )
        try:
            return self._stage(duckdb_table, raw, {"__file": "file"}, {})
        except SourceError as exc:
            raise self._locate(exc.context.get("file", paths), exc) from exc
        except duckdb.Error as exc:
            named = _DUCKDB_FILE.search(str(exc))
            error = SourceError(f"Cannot read the JSON lines: {exc}", path=paths)
            raise (self._locate(named.group(1), error) if named else error) from exc

    def _locate(self, file: str, error: SourceError) -> SourceError:
        """The error for the first bad line of ``file``, with its number, else ``error``.

        DuckDB's ``read_json`` tells neither the line of a value that does not fit nor
        (reliably) the line of bad JSON: on that path only, the file is read again line by line.
        """
        view = f"__json_lines_{next(_names)}"
        self.connection.register(view, _lines_of(file))
        try:
            bad = self.connection.execute(
                f"SELECT line FROM {view} WHERE TRY(json_type(value)) IS DISTINCT FROM 'OBJECT' "
                "ORDER BY line LIMIT 1"
            ).fetchone()
            if bad is not None:
                return SourceError("A line is not a JSON object", file=file, line=bad[0])
            raw = (
                f"(SELECT line, unnest(json_transform(value, "
                f"{quote_literal(self.columns.structure())})) FROM {view})"
            )
            typed = self._typed(raw, {"line": "line"})
            try:
                return self._misfit(typed, {"line": "line"}, {"file": file}) or error
            finally:
                self.connection.execute(f"DROP TABLE IF EXISTS {typed}")
        finally:
            self.connection.unregister(view)


def _lines_of(file: str) -> pa.Table:
    """The non-blank lines of ``file`` with their numbers (from 1), for error reports only."""
    numbers, values = [], []
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                numbers.append(number)
                values.append(line)
    return pa.table({"line": pa.array(numbers, pa.int64()), "value": pa.array(values, pa.string())})
