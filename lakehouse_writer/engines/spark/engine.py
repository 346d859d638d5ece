"""The Spark engine: a table's rows as a DataFrame, written with Delta's MERGE, DELETE, append.

The rules are :mod:`lakehouse_writer.rules.sql` read as Spark SQL (the rows bound to the
query as a DataFrame argument of ``spark.sql``); the MERGE's conditions are
:mod:`lakehouse_writer.rules.merge`'s. A MERGE or DELETE takes its transaction id from the
session's conf (:func:`~lakehouse_writer.engines.spark.txn.delta_txn`), an append from its
options (:func:`~lakehouse_writer.engines.spark.txn.append`): one session per thread
(:mod:`lakehouse_writer.runtime.parallel`), so each table's writes carry their own.

A table's tombstones are a few keys: where a
:class:`~lakehouse_writer.engines.base.TombstoneStore` reaches them (delta-rs, given by the
router when it reaches the lakehouse), they are read and appended in the driver, not by a
Delta scan and a Delta append of their own; the same transaction id makes either way once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakehouse_writer.engines.base import ApplyResult, Declined, TombstoneStore, Write
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.engines.spark.gdpr import purge_deleted_rows
from lakehouse_writer.engines.spark.history import DriverHistory
from lakehouse_writer.engines.table import apply_table
from lakehouse_writer.read.rejected import rejected_rows
from lakehouse_writer.read.summary import RowSummary, summarize_rows
from lakehouse_writer.rules.dialect import SPARK
from lakehouse_writer.rules.history import (
    closing_source,
    history_clauses,
    history_source,
    stored_versions,
)
from lakehouse_writer.rules.merge import merge_clauses
from lakehouse_writer.rules.row_types import ARCHIVE, BEFORE, DELETES
from lakehouse_writer.rules.sql import (
    TableShape,
    conformed,
    is_upsert,
    latest_rows,
    merge_source,
    repeated_keys,
    table_columns,
    truncated,
)
from lakehouse_writer.rules.tombstones import TIME, outlived, tombstones_of
from lakehouse_writer.rules.truncate import Truncate
from lakehouse_writer.runtime.lines import dataframe_from_arrow, to_arrow
from lakehouse_writer.tables.files import last_log_version
from lakehouse_writer.tables.manager import TableInfo, no_data_files
from producer_lib.schema import TECHNICAL_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["SparkEngine", "apply_batch", "no_repeated_keys", "shape_of", "upserts"]

log = logging.getLogger(__name__)

TECHNICAL = frozenset(f.name for f in TECHNICAL_FIELDS)
ROWS = "__rows__"  # the relation the rules' SQL reads: the table's rows, bound by _query
TOMBSTONES = "__tombstones__"  # the table's tombstones, bound by _query
STORED = "__stored__"  # a history table's versions the rows touch, bound by _query
TARGET = "__target__"  # a history table's rows, bound by _query
_FEW_ROWS = 10_000  # a MERGE source this small is one partition: no shuffle for its window
# the most tombstones the store reads or appends in the driver; above, Spark's own scan and
# append are as fast (docs/PERFORMANCE.md, "Tombstones")
_LOCAL_TOMBSTONES = 10_000


def shape_of(table: TableInfo) -> TableShape:
    """The table as the rules see it: columns with their Spark types, keys, technical set."""
    columns = {name: dtype.simpleString() for name, dtype in table.columns.items()}
    return TableShape(columns, table.keys, TECHNICAL)


class SparkEngine:
    """The :class:`~lakehouse_writer.engines.base.Engine` of Spark's Delta.

    Args:
        spark: The session the table's work runs on (its own per thread).
        tombstones: Where it reaches them, reads and appends a table's tombstones in the
            driver (a Delta scan and a Delta append cost a job each, for a few keys); None:
            Spark does both.
        history: Where a small history MERGE's source is computed in the driver (default:
            batches of up to 10,000 rows).
    """

    name = "spark"
    dialect = SPARK

    def __init__(
        self,
        spark: SparkSession,
        tombstones: TombstoneStore | None = None,
        history: DriverHistory | None = None,
    ) -> None:
        self._spark = spark
        self._store = tombstones
        self._small_history = history or DriverHistory()
        self._kept: tuple[DataFrame, DataFrame] | None = None  # rows, the MERGE source bury cached

    def declines(self, table: TableInfo) -> str | None:
        """None: Spark writes every table."""
        return None

    def shape(self, table: TableInfo) -> TableShape:
        """The table as the rules see it."""
        return shape_of(table)

    def summarize(self, rows: DataFrame, table: TableInfo) -> RowSummary:
        """One job over the rows: counts per type, key range, oldest row, TRUNCATEs."""
        return summarize_rows(rows, table)

    def filter(self, rows: DataFrame, condition: str) -> DataFrame:
        """The rows for which ``condition`` holds."""
        from pyspark.sql import functions as F

        return rows.filter(F.expr(condition))

    def rejected(self, rows: DataFrame, condition: str, reason: str, table: TableInfo) -> Any:
        """The rows for which ``condition`` holds, in the ``_rejected`` layout."""
        from pyspark.sql import functions as F

        return rejected_rows(self.filter(rows, condition), F.expr(reason), table.ref.qualified)

    def change_times(self, rows: DataFrame, below_us: int) -> list[int]:
        """The distinct change times (µs) of the rows older than ``below_us``, ascending."""
        from pyspark.sql import functions as F

        older = rows.filter(F.col("__change_time") < F.timestamp_micros(F.lit(below_us)))
        found = older.select(F.unix_micros("__change_time")).distinct().collect()
        return sorted(r[0] for r in found)

    def is_empty(self, table: TableInfo) -> bool:
        """True when the table holds no rows.

        A table this writer created is empty at version 0 (the creation commit), and so is
        one whose latest version has no data files (its checksum says so): log lookups.
        Otherwise a Spark job looks.
        """
        spark = self._spark
        if table.created and last_log_version(spark, table.path) == 0:
            return True
        if no_data_files(spark, table.path):
            return True
        return bool(spark.read.format("delta").load(table.path).isEmpty())

    def delete(self, table: TableInfo, truncates: Sequence[Truncate], write: Write) -> None:
        """One Delta DELETE of what ``truncates`` cover, as ``write``.

        A history table's versions are closed, not deleted: one MERGE of
        :func:`~lakehouse_writer.rules.history.closing_source`.
        """
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        if table.history:
            stored = self._spark.read.format("delta").load(table.path)
            closing = closing_source(ROWS, self.shape(table), truncates, SPARK)
            self._merge_history(_query(closing, stored), table, write)
            return
        condition = F.expr(truncated(truncates, self.shape(table), SPARK))
        with txn.delta_txn(self._spark, write.app_id, write.version):
            DeltaTable.forPath(self._spark, table.path).delete(condition)

    def outlive(self, rows: DataFrame, table: TableInfo, summary: RowSummary) -> DataFrame:
        """The rows no tombstone of the table outlives.

        All of them while none is newer than their oldest row: no join.
        """
        tombstones = self._tombstones(table, summary.oldest)
        if tombstones is None:
            return rows
        before = bool(summary.counts.get(BEFORE))
        sql = outlived(ROWS, TOMBSTONES, self.shape(table), rows.columns, SPARK, before=before)
        return _query(sql, rows, tombstones=tombstones)

    def _tombstones(self, table: TableInfo, newer_than: int | None) -> DataFrame | None:
        """The table's tombstones newer than ``newer_than`` (µs); None: it has none.

        From the store as a small local relation where it reads them, else a Delta scan.
        """
        from pyspark.sql import functions as F

        path = table.tombstones
        assert path is not None
        if self._store is not None:
            try:
                found = self._store.read(path, table, newer_than)
            except Declined:
                found = None  # not read: Spark does
            else:
                if found is None or found.num_rows == 0:
                    return None
            if found is not None and found.num_rows <= _LOCAL_TOMBSTONES:
                return dataframe_from_arrow(self._spark, found)
        version = last_log_version(self._spark, path)
        if version < 0:
            return None
        # Read as of now: the batch appends its own tombstones before its MERGE, and a write
        # to a path makes Spark compute again the cached plans that read it (the MERGE source
        # bury caches). Unpinned, that second reading let them outlive the batch's own rows.
        reader = self._spark.read.format("delta").option("versionAsOf", version)
        found_by_spark = reader.load(path)
        if newer_than is None:
            return found_by_spark
        return found_by_spark.filter(F.col(TIME) > F.timestamp_micros(F.lit(newer_than)))

    def bury(self, rows: DataFrame, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """Append the tombstones of the rows' winning deletes to the table's (created if new).

        They are the deletes of the MERGE's source, which is cached for the MERGE that follows
        (of the same rows): the source is computed once.
        """
        assert table.tombstones is not None
        shape = self.shape(table)
        self._release()  # a try before this one (a commit conflict) left its source
        source = self._source(rows, table, summary).persist()
        self._kept = (rows, source)
        picked = f"SELECT * FROM {ROWS}"  # the source, bound as the rows of the query
        dead = _query(tombstones_of(picked, shape, SPARK), source)
        try:
            if not self._buried(dead, table, summary, write):
                txn.append(dead, table.tombstones, write.app_id, write.version)
        except BaseException:
            self._release()
            raise

    def _buried(self, dead: DataFrame, table: TableInfo, summary: RowSummary, write: Write) -> bool:
        """Append the tombstones ``dead`` through the store; False: not done (Spark does)."""
        deletes = sum(summary.counts.get(c, 0) for c in (*DELETES, BEFORE))
        if self._store is None or deletes > _LOCAL_TOMBSTONES:
            return False
        assert table.tombstones is not None
        return self._store.bury(table.tombstones, to_arrow(dead), table, write)

    def merge(self, rows: DataFrame, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """One Delta MERGE of the rows' last row per key, restricted to their key range.

        Into a history table, one MERGE of the versions of the keys the rows touch
        (:func:`~lakehouse_writer.rules.history.history_source`).
        """
        if table.history:
            self._release()
            self._history(rows, table, summary, write)
            return
        kept = self._kept
        try:
            source = kept[1] if kept and kept[0] is rows else self._source(rows, table, summary)
            self._merge(source, table, summary, write)
        finally:
            self._release()

    def _release(self) -> None:
        """Drop the MERGE source :meth:`bury` cached, if any."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept[1].unpersist()

    def _source(self, rows: DataFrame, table: TableInfo, summary: RowSummary) -> DataFrame:
        """The MERGE's source: one row per key with its action (one partition when few)."""
        if sum(n for n in summary.counts.values()) <= _FEW_ROWS:
            rows = rows.coalesce(1)
        return _query(_merge_source(rows, self.shape(table), summary), rows)

    def _merge(
        self, source: DataFrame, table: TableInfo, summary: RowSummary, write: Write
    ) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        clauses = merge_clauses(list(table.columns), table.keys, TECHNICAL, SPARK)
        on = F.expr(clauses.on)
        if summary.key_range is not None:  # a target-only condition: Delta skips files
            first = table.keys[0]
            low, high = (F.lit(v).cast(table.columns[first]) for v in summary.key_range)
            on = on & F.col(f"t.{SPARK.quote(first)}").between(low, high)
        with txn.delta_txn(self._spark, write.app_id, write.version):
            (
                DeltaTable.forPath(self._spark, table.path)
                .alias("t")
                .merge(source.alias("s"), on)
                .whenMatchedDelete(clauses.delete)
                .whenMatchedUpdate(clauses.replace, set=_assigned(clauses.every))
                .whenMatchedUpdate(clauses.archive, set=_assigned(clauses.technical))
                .whenNotMatchedInsert(clauses.insert, values=_assigned(clauses.every))
                .execute()
            )

    def _history(
        self, rows: DataFrame, table: TableInfo, summary: RowSummary, write: Write
    ) -> None:
        """The MERGE of a history table: the touched keys' versions recomputed.

        Computed in the driver for a small batch (:class:`DriverHistory`), else by Spark.
        """
        from pyspark.sql import functions as F

        shape = self.shape(table)
        target = self._spark.read.format("delta").load(table.path)
        if summary.key_range is not None:  # the stored versions' files only, where they can be
            first = table.keys[0]
            low, high = (F.lit(v).cast(table.columns[first]) for v in summary.key_range)
            target = target.filter(F.col(SPARK.quote(first)).between(low, high))
        before = bool(summary.counts.get(BEFORE))
        if self._small_history.takes(sum(summary.counts.values()), shape, rows.columns):
            arrow = to_arrow(rows)
            candidates = to_arrow(_with_first_key(target, table.keys[0], arrow))
            source = self._small_history.source(
                self._spark, arrow, candidates, shape, rows.columns, before
            )
            if source is not None:  # rows that change nothing (an UPDATE's kept key's image)
                self._merge_history(source, table, write)
            return
        touched = stored_versions(TARGET, ROWS, shape, SPARK)
        kept = _query(touched, rows, target=target).persist()
        try:
            sql = history_source(ROWS, STORED, shape, rows.columns, SPARK, before=before)
            self._merge_history(_query(sql, rows, stored=kept), table, write)
        finally:
            kept.unpersist()

    def _merge_history(self, source: DataFrame, table: TableInfo, write: Write) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        clauses = history_clauses(self.shape(table), SPARK)
        every = _assigned(clauses.every)
        with txn.delta_txn(self._spark, write.app_id, write.version):
            (
                DeltaTable.forPath(self._spark, table.path)
                .alias("t")
                .merge(source.alias("s"), F.expr(clauses.on))
                .whenMatchedDelete(clauses.drop)
                .whenMatchedUpdate(clauses.keep, set=every)
                .whenNotMatchedInsert(clauses.keep, values=every)
                .execute()
            )

    def append(self, rows: DataFrame, table: TableInfo, write: Write, *, unique: bool) -> bool:
        """Append the rows' upserts (with ``unique``, only when no key repeats)."""
        check = (lambda: no_repeated_keys(rows, table.keys)) if unique and table.keys else None
        return txn.append(
            upserts(rows, table), table.path, write.app_id, write.version, check=check
        )

    def append_latest(self, rows: DataFrame, table: TableInfo, write: Write) -> None:
        """Append the last row per key of the rows' upserts."""
        shape = self.shape(table)
        latest = f"({latest_rows(ROWS, shape, rows.columns, SPARK)}) latest"
        data = _query(conformed(latest, shape, rows.columns, SPARK, cast=True), rows)
        txn.append(data, table.path, write.app_id, write.version)

    def purge(self, table: TableInfo, batch_id: int) -> bool:
        """Rewrite the table so no current file keeps a deleted row; mark it for maintenance.

        :func:`~lakehouse_writer.engines.spark.gdpr.purge_deleted_rows`: the mark
        (``flow.gdpr_delete``) is how ``lakehouse-writer maintain`` finds GDPR deletes and
        vacuums their older files within ``LAKEHOUSE_GDPR_COMPLETION_HOURS``.

        Raises:
            GdprPurgeError: The rewrite failed (the table's rows are rejected with it).
        """
        purge_deleted_rows(self._spark, table, batch_id)
        return True

    def version(self, table: TableInfo) -> int:
        """The table's latest Delta version, from its log's files."""
        return last_log_version(self._spark, table.path)


def upserts(rows: DataFrame, table: TableInfo) -> DataFrame:
    """The rows' upserts in the table's columns and types (NULL for a column they lack).

    :func:`~lakehouse_writer.rules.sql.conformed`'s parts applied to the DataFrame itself,
    not through ``spark.sql``'s temporary views: Spark hands over no metrics of an observed
    DataFrame read through them, and the reload bet's ``Observation.get`` waited forever.
    """
    columns = table_columns(shape_of(table), rows.columns, SPARK, cast=True)
    return rows.where(is_upsert(SPARK)).selectExpr(*columns)


def no_repeated_keys(rows: DataFrame, keys: tuple[str, ...]) -> bool:
    """True when no key occurs twice in ``rows`` (one job; a hash collision says False)."""
    return bool(_query(repeated_keys(ROWS, keys, SPARK), rows).isEmpty())


def _merge_source(rows: DataFrame, shape: TableShape, summary: RowSummary) -> str:
    """The SQL of the MERGE's source over :data:`ROWS` (what the batch's types need)."""
    counts = summary.counts
    return merge_source(
        ROWS,
        shape,
        rows.columns,
        SPARK,
        before=bool(counts.get(BEFORE)),
        archives=bool(counts.get(ARCHIVE)),
    )


def _with_first_key(target: DataFrame, column: str, rows: pa.Table) -> DataFrame:
    """The rows of ``target`` whose first key column holds a value it holds in ``rows``.

    A literal list, not a join: Delta skips the files whose statistics hold none of them.
    """
    from pyspark.sql import functions as F

    values = rows.column(column).unique().to_pylist()
    wanted = F.col(SPARK.quote(column)).isin([v for v in values if v is not None])
    return target.filter(wanted | F.col(SPARK.quote(column)).isNull() if None in values else wanted)


_NAMES = {"rows": ROWS, "tombstones": TOMBSTONES, "stored": STORED, "target": TARGET}


def _query(sql: str, rows: DataFrame, **others: DataFrame) -> DataFrame:
    """``sql`` over ``rows`` (named :data:`ROWS` in it), on the rows' session.

    ``others`` bind the other relations by keyword: ``tombstones`` (:data:`TOMBSTONES` in
    the text), ``stored`` (:data:`STORED`), ``target`` (:data:`TARGET`). ``spark.sql``
    formats its text with the DataFrames it is given: braces of the rules' text (a column
    named ``a{b}``) are doubled first.
    """
    text = sql.replace("{", "{{").replace("}", "}}")
    frames: dict[str, Any] = {"rows": rows, **others}
    for keyword in frames:
        text = text.replace(_NAMES[keyword], "{" + keyword + "}")
    return rows.sparkSession.sql(text, None, **frames)


def _assigned(pairs: dict[str, str]) -> dict[str, str | Column]:
    """Column -> SQL of a MERGE clause, as Delta's builder types it."""
    return dict(pairs)


def apply_batch(
    df: DataFrame,
    batch_id: int,
    table: TableInfo,
    instance_id: str,
    applied_truncates: Sequence[Truncate] = (),
    summary: RowSummary | None = None,
) -> ApplyResult:
    """Apply one micro-batch's decoded rows of one table with Spark; a replay is a no-op.

    The writer's steps (:func:`~lakehouse_writer.engines.table.apply_table`) on the Spark
    engine: a plain function tests and tools call on a static DataFrame (decoded rows: the
    payload columns by original name, the technical fields, ``topic``/``partition``/
    ``offset``).
    """
    engine = SparkEngine(df.sparkSession)
    return apply_table(engine, df, table, batch_id, instance_id, applied_truncates, summary)
