"""The tables of a batch decoded and applied in the driver: no Spark job for them.

A source system's delta load touches hundreds of tables with a few rows each. Through Spark,
each costs a decode job, a summary job and some twenty analyzed DataFrame operations before
anything is written: the plans, not the rows, were the batch's time (``docs/PERFORMANCE.md``).
:class:`DriverTables` takes the tables :class:`~lakehouse_writer.route.router.Router` gives
the driver: their raw rows are collected once (or were read into the driver whole), decoded
there (:class:`~lakehouse_writer.read.driver_decode.DriverDecoder`) and applied by the
delta-rs engine with the same rules as Spark's. A table is applied here whole or not at all:
one the driver does not decode or delta-rs declines is left to Spark's decode and engine,
which apply it (skipping what delta-rs committed of it, by the transaction ids).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse_writer.engines.base import ApplyResult, Declined
from lakehouse_writer.engines.delta_rs.engine import ArrowRows
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.decode import resolve
from lakehouse_writer.read.driver_decode import DriverDecoder, NotDecoded, RawRows, by_header
from lakehouse_writer.read.framing import header_tag
from lakehouse_writer.read.keys import KeySchemaRef, candidates
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.tables.manager import TableInfo, TableRef
from producer_lib.errors import SchemaError
from producer_lib.schema import ValueSchema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from lakehouse_writer.commit.truncate_log import TruncateLog
    from lakehouse_writer.read.catalog import SchemaCatalog
    from lakehouse_writer.runtime.parallel import Outcome, TableApplier
    from lakehouse_writer.tables.manager import TableManager

__all__ = ["DriverTables", "Taken"]

log = logging.getLogger(__name__)


@dataclass
class Taken:
    """What :meth:`DriverTables.apply` did.

    Attributes:
        results: One per table applied here.
        headers: The headers whose rows are applied here (Spark's decode leaves them).
    """

    results: list[ApplyResult] = field(default_factory=list)
    headers: set[bytes] = field(default_factory=set)


@dataclass(frozen=True)
class _Table:
    """A table of the batch for the driver, before its rows are read."""

    header: bytes
    schema_json: str
    schema: ValueSchema
    keys: tuple[KeySchemaRef, ...]
    info: TableInfo


class DriverTables:
    """Decodes and applies the batch's tables the router gives the driver (see above).

    Args:
        router: Which tables are the driver's.
        tables: Creates and evolves the tables.
        catalog: Where the writer schemas come from.
        truncates: The TRUNCATEs of earlier batches.
    """

    def __init__(
        self,
        router: Router,
        tables: TableManager,
        catalog: SchemaCatalog,
        truncates: TruncateLog,
    ) -> None:
        self._router = router
        self._tables = tables
        self._catalog = catalog
        self._truncates = truncates
        self._decoder = DriverDecoder()

    def warm_up(self) -> None:
        """Load DuckDB's Avro reader now rather than on the first batch's path."""
        if self._router.max_rows:
            self._decoder.warm_up()

    def apply(
        self,
        rows_of: Callable[[Collection[bytes]], pa.Table],
        rows: Mapping[bytes, int],
        decoded: Collection[bytes],
        stopped: Collection[str],
        batch_id: int,
        applier: TableApplier,
        busy: TableRef | None = None,
        topics_of: Callable[[bytes], Collection[str]] | None = None,
    ) -> Taken:
        """Apply the batch's tables that are the driver's (see the module docstring).

        Args:
            rows_of: The raw rows of data topics with the given headers, each header's rows
                together in batch order (:meth:`~lakehouse_writer.read.scan.BatchScan.rows_of`).
            rows: Rows per header of the batch's data topics.
            decoded: Headers the scan decoded (their tables are Spark's).
            stopped: Tables stopped by a schema error (Spark's decode rejects their rows).
            batch_id: The micro-batch.
            applier: Runs the tables' work several at a time.
            busy: A table another step applies in this batch (the reload's), left alone.
            topics_of: The topics of a header's rows (a registry's schema names none).
        """
        taken = Taken()
        if not self._router.max_rows:
            return taken
        started = time.monotonic()
        mine = self._tables_of(rows, decoded, stopped, busy, applier, topics_of)
        if not mine:
            return taken
        left: dict[str, str] = {}
        for chunk in _chunks(mine, rows, self._router.max_rows):
            for outcome in self._apply_chunk(rows_of, chunk, batch_id, applier):
                if isinstance(outcome.error, (NotDecoded, Declined)):
                    left[outcome.item.info.ref.qualified] = str(outcome.error)
                elif outcome.error is not None:
                    raise outcome.error
                else:
                    assert outcome.result is not None
                    taken.results.append(outcome.result)
                    taken.headers.add(outcome.item.header)
        for table, reason in sorted(left.items()):
            log.info("table left to Spark table=%s batch=%d reason=%s", table, batch_id, reason)
        log.info(
            "driver tables applied batch=%d tables=%d rows=%d left_to_spark=%d seconds=%.3f",
            batch_id,
            len(taken.results),
            sum(sum(r.rows.values()) for r in taken.results),
            len(left),
            time.monotonic() - started,
        )
        return taken

    def _tables_of(
        self,
        rows: Mapping[bytes, int],
        decoded: Collection[bytes],
        stopped: Collection[str],
        busy: TableRef | None,
        applier: TableApplier,
        topics_of: Callable[[bytes], Collection[str]] | None,
    ) -> list[_Table]:
        """The batch's tables for the driver, made or evolved for their rows.

        A table qualifies when one writer schema gives all its rows in the batch, the scan
        did not decode them, it is not stopped or ``busy``, and the router gives its rows
        to the driver (:meth:`~lakehouse_writer.route.router.Router.decodes_in_driver`).
        """
        tags = {header_tag(h): h for h in rows}
        headers_of: dict[TableRef, list[bytes]] = {}
        found: dict[bytes, tuple[str, ValueSchema, str | None]] = {}
        for tag, entry in resolve(set(tags), self._catalog).items():
            try:
                schema = ValueSchema.from_avro_json(entry.schema_json)
            except SchemaError:
                continue  # Spark's decode rejects its rows
            headers_of.setdefault(TableRef.of(schema), []).append(tags[tag])
            found[tags[tag]] = (entry.schema_json, schema, entry.topic)
        chosen = [
            (ref, headers[0])
            for ref, headers in headers_of.items()
            if len(headers) == 1
            and headers[0] not in decoded
            and rows[headers[0]] <= self._router.max_rows
            and ref.qualified not in stopped
            and ref != busy
        ]
        self._tables.ensure_all([found[h][1] for _, h in chosen], applier)
        mine = []
        for _, header in chosen:
            schema_json, schema, topic = found[header]
            try:
                info = self._tables.ensure(schema)
            except LakehouseWriterError:
                continue  # Spark's decode reports it (and stops the table)
            if self._router.decodes_in_driver(info, rows[header]):
                topics = [topic] if topic or topics_of is None else topics_of(header)
                keys = candidates(schema, self._catalog.key_schemas(topics))
                mine.append(_Table(header, schema_json, schema, keys, info))
        return mine

    def _apply_chunk(
        self,
        rows_of: Callable[[Collection[bytes]], pa.Table],
        chunk: list[_Table],
        batch_id: int,
        applier: TableApplier,
    ) -> list[Outcome[_Table, ApplyResult]]:
        """Collect the raw rows of ``chunk``'s tables, then apply each (several at once)."""
        raw = by_header(rows_of([t.header for t in chunk]))

        def one(table: _Table, session: SparkSession) -> ApplyResult:
            return self._apply_one(table, raw[table.header], batch_id, session)

        return applier.map(one, [t for t in chunk if t.header in raw])

    def _apply_one(
        self, table: _Table, raw: RawRows, batch_id: int, session: SparkSession
    ) -> ApplyResult:
        """Decode and apply one table's rows; :class:`NotDecoded` or :class:`Declined`: Spark's."""
        data = self._decoder.decode(
            raw, table.header, table.schema_json, table.schema, table.keys, table.info
        )
        rows = ArrowRows.of(data)
        try:
            applied = self._truncates.of(table.info.ref.qualified)
            return self._router.apply(TableRows(table.info, rows), batch_id, applied, session)
        finally:
            rows.close()


def _chunks(tables: list[_Table], rows: Mapping[bytes, int], budget: int) -> list[list[_Table]]:
    """``tables`` in runs of at most ``budget`` rows together: what the driver holds at once.

    No table has more rows than ``budget`` (:meth:`DriverTables._tables_of`).
    """
    chunks: list[list[_Table]] = []
    held = budget
    for table in tables:
        if held + rows[table.header] > budget:
            chunks.append([])
            held = 0
        chunks[-1].append(table)
        held += rows[table.header]
    return chunks
