"""The delta-rs engine: a table's rows as Arrow in the driver, the rules in DuckDB, delta-rs writes.

A Delta MERGE through Spark runs about 19 jobs whatever its size; a source system's delta
load touches hundreds of tables with a few rows each, so that fixed cost, not the rows, was
the writer's time (``docs/PERFORMANCE.md``). This engine applies such a table in the driver:
the rows (Arrow, in the table's columns and types) go into an in-memory DuckDB, which runs
the same rules as Spark (:mod:`lakehouse_writer.rules.sql`, DuckDB's dialect); delta-rs
merges, deletes and appends with the same conditions (DataFusion's dialect) and the same
transaction ids (:class:`~lakehouse_writer.engines.delta_rs.writes.DeltaRsWrites`).

It declines (:class:`~lakehouse_writer.engines.base.Declined`, nothing written) a table it
cannot write, a GDPR delete (the purge is Spark's) and a history table (SCD type 2); a write
delta-rs fails is declined too,
and Spark does it — skipping what delta-rs committed, by the same transaction ids.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import count
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse_writer.engines.base import Declined, Write
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.read.summary import RowSummary
from lakehouse_writer.rules.dialect import DATAFUSION, DUCKDB
from lakehouse_writer.rules.merge import merge_clauses
from lakehouse_writer.rules.row_types import ACTION, ACTION_DELETE, ARCHIVE, BEFORE
from lakehouse_writer.rules.sql import (
    TableShape,
    conformed,
    latest_rows,
    merge_source,
    repeated_keys,
    summary_query,
    truncated,
)
from lakehouse_writer.rules.tombstones import TIME, outlived, tombstone_columns
from lakehouse_writer.rules.truncate import Truncate
from lakehouse_writer.runtime import duck
from producer_lib.schema import TECHNICAL_FIELDS

if TYPE_CHECKING:
    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["ArrowRows", "DeltaRsEngine"]

log = logging.getLogger(__name__)

TECHNICAL = frozenset(f.name for f in TECHNICAL_FIELDS)
_names = count()
_ARROW_TIME = pa.timestamp("us", "UTC")  # Spark's TimestampType in Arrow


@dataclass(frozen=True)
class ArrowRows:
    """A table's rows of a batch in the driver, in a DuckDB temp table; filters as SQL.

    Attributes:
        con: The DuckDB connection that holds them.
        relation: The temp table of all the rows.
        columns: Their columns.
        where: Conditions that select the rows meant (all of them: none).
    """

    con: duckdb.DuckDBPyConnection
    relation: str
    columns: tuple[str, ...]
    where: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, rows: pa.Table) -> ArrowRows:
        """Rows (in the table's columns and types) in a DuckDB temp table of their own.

        A table, not a view over the Arrow data: DuckDB 1.5.5 imports pytz for a self-join
        over a registered Arrow table with time zone timestamps (the rules' BEFORE pairs).
        """
        con, name = duck.cursor(), f"rows_{next(_names)}"
        con.register(f"{name}_arrow", rows)
        con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{name}_arrow"')
        con.unregister(f"{name}_arrow")
        return cls(con, f'"{name}"', tuple(rows.column_names))

    @property
    def sql(self) -> str:
        """The rows meant, as a relation (a subquery)."""
        if not self.where:
            return self.relation
        return f"(SELECT * FROM {self.relation} WHERE {' AND '.join(self.where)})"

    def derived(self, query: str) -> ArrowRows:
        """The result of ``query`` as rows of their own, on the same connection."""
        name = f"rows_{next(_names)}"
        self.con.execute(f'CREATE TEMP TABLE "{name}" AS {query}')
        return ArrowRows(self.con, f'"{name}"', self.columns)

    def arrow(self, query: str) -> pa.Table:
        """The result of ``query`` as Arrow."""
        return self.con.sql(query).to_arrow_table()

    def close(self) -> None:
        """Drop the temp table and the connection."""
        self.con.close()


class _Sources:
    """MERGE sources computed ahead (for a batch's tombstones), by their SQL; a few, any thread.

    The SQL names the rows' own temp table, so an entry is never another batch's.
    """

    _KEPT = 64

    def __init__(self) -> None:
        self._by_sql: OrderedDict[str, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, sql: str, source: pa.Table) -> None:
        with self._lock:
            self._by_sql[sql] = source
            while len(self._by_sql) > self._KEPT:
                self._by_sql.popitem(last=False)

    def pop(self, sql: str) -> pa.Table | None:
        with self._lock:
            return self._by_sql.pop(sql, None)


class DeltaRsEngine:
    """The :class:`~lakehouse_writer.engines.base.Engine` of delta-rs in the driver.

    Args:
        writes: delta-rs's writes of the writer (table handles, transaction ids, failures).
    """

    name = "delta-rs"
    dialect = DUCKDB

    def __init__(self, writes: DeltaRsWrites) -> None:
        self._writes = writes
        self._sources = _Sources()

    def declines(self, table: TableInfo) -> str | None:
        """A history table (SCD type 2) is Spark's: its versions are computed there."""
        return "a history table (Spark keeps its versions)" if table.history else None

    def shape(self, table: TableInfo) -> TableShape:
        """The table as the rules see it."""
        columns = {name: dtype.simpleString() for name, dtype in table.columns.items()}
        return TableShape(columns, table.keys, TECHNICAL)

    def summarize(self, rows: ArrowRows, table: TableInfo) -> RowSummary:
        """One query over the rows: counts per type, key range, oldest row, TRUNCATEs."""
        found = rows.arrow(summary_query(rows.sql, self.shape(table), DUCKDB))
        return RowSummary.of_counts(tuple(r.values()) for r in found.to_pylist())

    def filter(self, rows: ArrowRows, condition: str) -> ArrowRows:
        """The rows for which ``condition`` holds (one more condition, nothing computed)."""
        return replace(rows, where=(*rows.where, f"({condition})"))

    def rejected(self, rows: ArrowRows, condition: str, reason: str, table: TableInfo) -> Any:
        """Not here: rows this engine would reject are Spark's to reject, with their bytes."""
        raise Declined("rows to reject", table=table.ref.qualified)

    def change_times(self, rows: ArrowRows, below_us: int) -> list[int]:
        """The distinct change times (µs) of the rows older than ``below_us``, ascending."""
        time = DUCKDB.quote("__change_time")
        below = DUCKDB.at_micros.format(n=below_us)
        query = f"SELECT DISTINCT epoch_us({time}) FROM {rows.sql} WHERE {time} < {below}"
        return sorted(r[0] for r in rows.con.execute(query).fetchall())

    def is_empty(self, table: TableInfo) -> bool:
        """True when the table's latest version has no data file."""
        return self._writes.is_empty(table)

    def delete(self, table: TableInfo, truncates: Sequence[Truncate], write: Write) -> None:
        """One delta-rs DELETE of what ``truncates`` cover, as ``write``."""
        where = truncated(truncates, self.shape(table), DATAFUSION)
        self._done(self._writes.delete(table, where, write), table, "delete")

    def outlive(self, rows: ArrowRows, table: TableInfo, summary: RowSummary) -> ArrowRows:
        """The rows no tombstone of the table outlives.

        All of them while none is newer than their oldest row: no join.
        """
        assert table.tombstones is not None
        tombstones = self._writes.read(table.tombstones, table, summary.oldest)
        if tombstones is None or tombstones.num_rows == 0:
            return rows
        name = f"tombstones_{next(_names)}"
        rows.con.register(f"{name}_arrow", tombstones)  # a table, as in ArrowRows.of
        rows.con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{name}_arrow"')
        rows.con.unregister(f"{name}_arrow")
        try:
            before = bool(summary.counts.get(BEFORE))
            sql = outlived(
                rows.sql, f'"{name}"', self.shape(table), rows.columns, DUCKDB, before=before
            )
            return rows.derived(sql)
        finally:
            rows.con.execute(f'DROP TABLE "{name}"')

    def bury(self, rows: ArrowRows, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """Append the tombstones of the rows' winning deletes to the table's (created if new).

        They are the deletes of the MERGE's source, which is kept for the MERGE that follows.
        """
        assert table.tombstones is not None
        shape = self.shape(table)
        sql = _merge_source(rows, shape, summary)
        source = _source(rows.arrow(sql), table)
        self._sources.put(sql, source)
        dead = source.filter(pc.equal(source[ACTION], ACTION_DELETE))
        dead = dead.select([*shape.keys, TIME]).rename_columns(list(tombstone_columns(shape)))
        done = self._writes.bury(table.tombstones, dead, table, write)

        self._done(done, table, "append the tombstones of")

    def merge(self, rows: ArrowRows, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """One delta-rs MERGE of the rows' last row per key, restricted to their key range."""
        sql = _merge_source(rows, self.shape(table), summary)
        clauses = merge_clauses(
            list(table.columns), table.keys, TECHNICAL, DATAFUSION, summary.key_range
        )
        source = self._sources.pop(sql) or _source(rows.arrow(sql), table)
        self._done(self._writes.merge(lambda: source, table, clauses, write), table, "merge")

    def append(self, rows: ArrowRows, table: TableInfo, write: Write, *, unique: bool) -> bool:
        """Append the rows' upserts (with ``unique``, only when no key repeats)."""
        if unique and table.keys:
            if rows.con.execute(repeated_keys(rows.sql, table.keys, DUCKDB)).fetchall():
                return False
        data = rows.arrow(conformed(rows.sql, self.shape(table), rows.columns, DUCKDB, False))
        self._done(self._writes.append(lambda: _table(data, table), table, write), table, "append")
        return True

    def append_latest(self, rows: ArrowRows, table: TableInfo, write: Write) -> None:
        """Append the last row per key of the rows' upserts."""
        shape = self.shape(table)
        latest = f"({latest_rows(rows.sql, shape, rows.columns, DUCKDB)}) latest"
        data = rows.arrow(conformed(latest, shape, rows.columns, DUCKDB, False))
        self._done(self._writes.append(lambda: _table(data, table), table, write), table, "append")

    def purge(self, table: TableInfo, batch_id: int) -> bool:
        """Not here: a GDPR delete's purge is Spark's (the router sends such tables there)."""
        raise Declined("a GDPR delete", table=table.ref.qualified)

    def version(self, table: TableInfo) -> int:
        """The table's latest Delta version."""
        return self._writes.version(table)

    @staticmethod
    def _done(done: bool, table: TableInfo, what: str) -> None:
        if not done:
            raise Declined(f"delta-rs did not {what} the rows", table=table.ref.qualified)


def _merge_source(rows: ArrowRows, shape: TableShape, summary: RowSummary) -> str:
    """The SQL of the MERGE's source over the rows (what the batch's types need)."""
    counts = summary.counts
    return merge_source(
        rows.sql,
        shape,
        rows.columns,
        DUCKDB,
        before=bool(counts.get(BEFORE)),
        archives=bool(counts.get(ARCHIVE)),
        cast=False,
    )


def _table(data: pa.Table, table: TableInfo) -> pa.Table:
    """``data`` in the table's Arrow schema (DuckDB names a TIMESTAMPTZ's zone its own way)."""
    return data.cast(arrow_schema(table))


def _source(data: pa.Table, table: TableInfo) -> pa.Table:
    """The MERGE's source in the table's types, then its action and base time."""
    schema = arrow_schema(table)
    extra = [data.schema.field(c) for c in data.column_names[len(schema) :]]
    extra = [f.with_type(_ARROW_TIME) if f.name.endswith("time") else f for f in extra]
    return data.cast(pa.schema([*schema, *extra]))


def arrow_schema(table: TableInfo) -> pa.Schema:
    """The table's columns as an Arrow schema (Spark's Arrow types)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.schema(
        [pa.field(name, to_arrow_type(dtype)) for name, dtype in table.columns.items()]
    )
