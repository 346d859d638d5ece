"""Apply decoded change rows of one micro-batch to one Delta table.

:func:`apply_batch` is a plain function: give it a DataFrame of decoded rows (payload columns
by original name, the technical fields, ``topic``/``partition``/``offset`` and optionally the
raw ``__raw_key``/``__raw_value`` bytes for rejected rows; the writer leaves them out and fills
them in from the batch) and it applies them, idempotently per ``batch_id``:

1. TRUNCATE rows (``T``) become one Delta DELETE of the rows in their scope older than them
   (see :mod:`lakehouse_writer.truncate`). Rows of the batch older than a TRUNCATE are
   merged before it (steps 2-4 on those rows; usually there are none: the rows share the
   TRUNCATE's transaction), so it covers what they left — the image of an update, the
   payload an ARCHIVE kept. Rows covered by TRUNCATEs of earlier batches are dropped.
2. BEFORE images (``B``) become deletes of the old key when their update moved the key. The
   pair of a ``B`` is the ``U`` with the same ``__change_time`` and ``__source_rowid``, or —
   when ``__source_rowid`` is null — the ``U`` right after it (same partition, offset + 1).
   A ``B`` without a moved pair is ignored.
3. One row per key survives: the latest by (``__change_time``, partition, offset). An
   ARCHIVE that wins after an earlier transaction's upsert or delete of its key in the batch
   is folded with it (:func:`latest_per_key`), so batch boundaries do not change the result.
4. One MERGE upserts (I/U/A/R), deletes (D/X/G) and archives (P: stored payload kept,
   ``__change_type`` = ``P``), each only over stored rows that are not newer. The target is
   restricted to the batch's range of the first key column, so Delta skips the files
   outside it. Fast path: when an unscoped TRUNCATE left the table empty and every row is an
   upsert, the rows are appended instead (no join; no sort either when no key repeats,
   which a job checks first: ``txn.append``'s ``check``).
5. GDPR (``G``) rows: after the MERGE the table is rewritten so no current data file still
   holds a deleted row, and marked for maintenance (:mod:`lakehouse_writer.gdpr`).

Tables without a key are append-only: I/U/A/R append, T truncates, the other types are
returned as rejected rows with an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse_writer import txn
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.gdpr import purge_deleted_rows
from lakehouse_writer.lakehouse_files import last_log_version
from lakehouse_writer.merge import (
    ACTION,
    BASE_TIME,
    DATAFUSION,
    SPARK,
    Dialect,
    MergeClauses,
    merge_clauses,
)
from lakehouse_writer.summary import RowSummary, summarize_rows
from lakehouse_writer.system_tables import rejected_rows
from lakehouse_writer.tables import no_data_files
from lakehouse_writer.truncate import Truncate, truncated, unknown_columns
from producer_lib.schema import TECHNICAL_FIELDS
from producer_lib.timing import Steps

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from lakehouse_writer.small import SmallChanges
    from lakehouse_writer.tables import TableInfo

log = logging.getLogger(__name__)

UPSERT_TYPES = ("I", "U", "A", "R")
DELETE_TYPES = ("D", "X", "G")
KNOWN_TYPES = (*UPSERT_TYPES, *DELETE_TYPES, "B", "P", "T")
BASE = "__base"
_TECHNICAL = frozenset(f.name for f in TECHNICAL_FIELDS)
_ORDER = ("__change_time", "partition", "offset")


@dataclass(frozen=True)
class ApplyResult:
    """What one batch did to one table.

    Attributes:
        table: ``namespace.name``.
        rows: Decoded rows given, per change type.
        truncates: TRUNCATEs applied (distinct time and scope).
        fast_path: True when the rows were appended instead of merged.
        gdpr_purged: True when the batch had GDPR deletes: the table was purged and marked.
        version: The table's Delta version afterwards.
        rejected: Rows that could not be applied (``_rejected`` layout), or None.
        small: True when its MERGEs were offered to delta-rs
            (:class:`~lakehouse_writer.small.SmallChanges`): the table's state in Spark was
            not rebuilt by them.
    """

    table: str
    rows: dict[str, int]
    truncates: tuple[Truncate, ...]
    fast_path: bool
    gdpr_purged: bool
    version: int
    rejected: DataFrame | None
    small: bool = False


def apply_batch(
    df: DataFrame,
    batch_id: int,
    table: TableInfo,
    instance_id: str,
    applied_truncates: Sequence[Truncate] = (),
    summary: RowSummary | None = None,
    small: SmallChanges | None = None,
) -> ApplyResult:
    """Apply one micro-batch's decoded rows of one table; a replay of ``batch_id`` is a no-op.

    Args:
        df: Decoded rows of this table (see the module docstring for the columns); persist it
            when it is expensive to compute: every step reads it.
        batch_id: The micro-batch id (monotonic per checkpoint).
        table: The target table, already created/evolved for these rows.
        instance_id: The writer instance id (from the checkpoint), for Delta txnAppId.
        applied_truncates: TRUNCATEs of earlier batches; batch rows they cover are dropped.
        summary: :func:`summarize_rows` of ``df`` when already known (the writer gets it
            from the pass that decodes the rows); None to compute it here.
        small: Merges few rows by delta-rs instead of Spark when it takes them (None: Spark
            does every MERGE).
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    app_id = txn.app_id_for(instance_id, table.ref.qualified)
    steps = Steps()
    with steps("summary"):
        summary = summary or summarize_rows(df, table)
        counts = summary.counts
    truncates, bad_truncates = _split_truncates(list(summary.truncates), table)
    rejected = _unknown_type_rows(df, table, bad_truncates, counts)
    if table.append_only:  # refused before the truncate filter: batch boundaries do not matter
        rejected = _union(rejected, _refused_rows(df, table, counts))
    rows = df.filter(F.col("__change_type") != "T")
    if applied_truncates:
        rows = rows.filter(~truncated(applied_truncates, table.columns))
    small = small if small is not None and small.takes(table, sum(counts.values())) else None
    if truncates and not table.append_only:
        with steps("truncate"):
            truncates_last = _apply_older_rows(
                rows, truncates, table, app_id, batch_id, summary, small
            )
            rows = rows.filter(F.col("__change_time") >= _timestamp(truncates_last[0]))
    else:
        truncates_last = truncates
        if truncates:
            rows = rows.filter(~truncated(truncates, table.columns))
    known_empty = False  # True: the table holds no rows (no need to look again)
    if truncates_last:
        with steps("truncate"):
            known_empty = _is_empty(spark, table)  # a first load's TRUNCATE deletes nothing
            if not known_empty:
                version = txn.txn_version(batch_id, txn.STEP_TRUNCATE)
                _delete_truncated(spark, table, truncates_last, app_id, version)
    fast = False
    with steps("rows"):
        if table.append_only:
            if any(counts.get(c) for c in UPSERT_TYPES):
                _append(
                    rows.filter(F.col("__change_type").isin(*UPSERT_TYPES)), table, app_id, batch_id
                )
        else:
            fast = _merge_or_append(
                rows, table, app_id, batch_id, truncates_last, summary, known_empty, small
            )
    with steps("purge"):
        purged = bool(counts.get("G")) and not table.append_only
        if purged:
            purge_deleted_rows(spark, table, batch_id)
    version = last_log_version(spark, table.path)
    log.info(
        "batch applied table=%s batch=%d rows=%s truncates=%d fast_path=%s small=%s "
        "version=%d steps=%s",
        table.ref.qualified,
        batch_id,
        counts,
        len(truncates),
        fast,
        small is not None,
        version,
        steps,
    )
    return ApplyResult(
        table.ref.qualified,
        counts,
        tuple(truncates),
        fast,
        purged,
        version,
        rejected,
        small=small is not None,
    )


def _split_truncates(
    truncates: list[Truncate], table: TableInfo
) -> tuple[list[Truncate], list[Truncate]]:
    good = [t for t in truncates if not unknown_columns(t, table.columns)]
    return good, [t for t in truncates if unknown_columns(t, table.columns)]


def _delete_truncated(
    spark: SparkSession, table: TableInfo, truncates: list[Truncate], app_id: str, version: int
) -> None:
    from delta.tables import DeltaTable

    with txn.delta_txn(spark, app_id, version):
        DeltaTable.forPath(spark, table.path).delete(truncated(truncates, table.columns))


def _unknown_type_rows(
    df: DataFrame, table: TableInfo, bad_truncates: list[Truncate], counts: dict[str | None, int]
) -> DataFrame | None:
    """Rows of unknown (or null) change types and of TRUNCATEs naming unknown columns.

    None when there are none (no frame to union into ``_rejected``).
    """
    from pyspark.sql import functions as F

    if not bad_truncates and all(c in KNOWN_TYPES for c in counts):
        return None

    bad = ~F.col("__change_type").isin(*KNOWN_TYPES) | F.col("__change_type").isNull()
    error = F.concat(F.lit("unknown __change_type "), F.coalesce("__change_type", F.lit("null")))
    for t in bad_truncates:
        cols = ", ".join(unknown_columns(t, table.columns))
        hit = (F.col("__change_type") == "T") & (F.unix_micros("__change_time") == F.lit(t.time_us))
        bad = bad | hit
        error = F.when(hit, F.lit(f"TRUNCATE scope names unknown columns: {cols}")).otherwise(error)
    return rejected_rows(df.filter(bad), error, table.ref.qualified)


def _refused_rows(
    df: DataFrame, table: TableInfo, counts: dict[str | None, int]
) -> DataFrame | None:
    """Rows an append-only table cannot apply (D/X/G/B/P need a key); None when none."""
    from pyspark.sql import functions as F

    refused = [c for c in KNOWN_TYPES if c not in (*UPSERT_TYPES, "T") and counts.get(c)]
    if not refused:
        return None
    message = F.concat(
        F.lit("table has no primary key (append-only): row type "),
        F.col("__change_type"),
        F.lit(" needs a key; only I/U/A/R/T apply. Add a primary key to the flow's schema."),
    )
    return rejected_rows(
        df.filter(F.col("__change_type").isin(*refused)), message, table.ref.qualified
    )


def _append(
    rows: DataFrame,
    table: TableInfo,
    app_id: str,
    batch_id: int,
    check: Callable[[], bool] | None = None,
) -> bool:
    version = txn.txn_version(batch_id, txn.STEP_ROWS)
    return txn.append(conform(rows, table), table.path, app_id, version, check=check)


def _apply_older_rows(
    rows: DataFrame,
    truncates: list[Truncate],
    table: TableInfo,
    app_id: str,
    batch_id: int,
    summary: RowSummary,
    small: SmallChanges | None,
) -> list[Truncate]:
    """Merge the rows older than the batch's latest TRUNCATEs, in time order with them.

    Each group of older rows is merged before the TRUNCATEs after it (:func:`_segments`).
    Returns the latest TRUNCATEs, still to apply.

    Raises:
        LakehouseWriterError: More writes than a batch's txn versions hold; raised before
            any write, so nothing is half-applied.
    """
    spark = rows.sparkSession
    before, truncates_last = _segments(rows, truncates, summary.oldest)
    writes = sum((segment is not None) + bool(group) for segment, group in before)
    if writes >= txn.STEP_TRUNCATE:
        raise LakehouseWriterError(
            "the batch needs too many writes to apply its rows and TRUNCATEs in time order; "
            "lower --max-offsets-per-trigger",
            table=table.ref.qualified,
            batch=batch_id,
            writes=writes,
        )
    step = 0
    for earlier, group in before:  # rows older than a TRUNCATE first, then it
        if earlier is not None:
            version = txn.segment_version(batch_id, step)
            _merge_rows(earlier, table, app_id, version, summary, small)
            step += 1
        if group:
            _delete_truncated(spark, table, group, app_id, txn.segment_version(batch_id, step))
            step += 1
    return truncates_last


def _merge_or_append(
    rows: DataFrame,
    table: TableInfo,
    app_id: str,
    batch_id: int,
    truncates: list[Truncate],
    summary: RowSummary,
    known_empty: bool,
    small: SmallChanges | None,
) -> bool:
    counts = summary.counts
    only_upserts = not any(counts.get(c) for c in (*DELETE_TYPES, "B", "P"))
    reload = only_upserts and any(t.unscoped for t in truncates)
    if reload and (known_empty or _is_empty(rows.sparkSession, table)):
        # A reload rarely repeats a key: its rows are appended as they are, on condition
        # that no key repeats (checked first); else the last per key.
        version = txn.txn_version(batch_id, txn.STEP_ROWS)
        if small is not None and small.append(conform(rows, table).toArrow, table, app_id, version):
            return True
        if not _append(rows, table, app_id, batch_id, lambda: unique_keys(rows, table.keys)):
            _append(latest_per_key(rows, table.keys), table, app_id, batch_id)
        return True
    if any(counts.get(c) for c in (*UPSERT_TYPES, *DELETE_TYPES, "B", "P")):
        version = txn.txn_version(batch_id, txn.STEP_ROWS)
        _merge_rows(rows, table, app_id, version, summary, small)
    return False


def _merge_rows(
    rows: DataFrame,
    table: TableInfo,
    app_id: str,
    version: int,
    summary: RowSummary,
    small: SmallChanges | None,
) -> None:
    """One MERGE of ``rows``: their actions, the last per key, the change-time guard."""
    if small is not None:  # few rows: one partition, so the window per key needs no shuffle
        rows = rows.coalesce(1)
    actions = _with_actions(rows, table, summary.counts)
    latest = latest_per_key(actions, table.keys, _payload(table))
    _merge(latest, table, app_id, version, summary.key_range, small)


def _segments(
    rows: DataFrame, truncates: list[Truncate], oldest: int | None
) -> tuple[list[tuple[DataFrame | None, list[Truncate]]], list[Truncate]]:
    """How a batch with TRUNCATEs is applied in time order.

    A row older than a TRUNCATE of its batch is applied before it, and the TRUNCATE then
    deletes what it covers of the result: the row may supersede an older row of its key
    (which must not win instead), and an ARCHIVE keeps the payload it finds before the
    TRUNCATE. Returns the steps before the latest TRUNCATEs — (rows to merge, or None, then
    the TRUNCATEs to delete) — and the latest TRUNCATEs, applied as usual with the rows not
    older than them. Usually the rows share the TRUNCATE's transaction: no step before, and
    no Spark job either when ``oldest`` (:attr:`RowSummary.oldest` of ``rows``: None when
    there is no row but TRUNCATEs) is not older than the latest TRUNCATE.
    """
    from pyspark.sql import functions as F

    times = sorted({t.time_us for t in truncates})
    if oldest is None or oldest >= times[-1]:
        return [], truncates
    older = rows.filter(F.col("__change_time") < F.timestamp_micros(F.lit(times[-1])))
    row_times = sorted(
        r[0] for r in older.select(F.unix_micros("__change_time")).distinct().collect()
    )
    steps: list[tuple[DataFrame | None, list[Truncate]]] = []
    pending: list[Truncate] = []  # not deleted yet
    start: int | None = None
    time = F.unix_micros("__change_time")
    for boundary in times:
        if any((start is None or start <= t) and t < boundary for t in row_times):
            if pending:  # deleted before the rows between them and ``boundary``
                if steps and not steps[-1][1]:
                    steps[-1] = (steps[-1][0], pending)
                else:
                    steps.append((None, pending))
                pending = []
            within = time < boundary if start is None else (time >= start) & (time < boundary)
            steps.append((rows.filter(within), []))
        pending += [t for t in truncates if t.time_us == boundary]
        start = boundary
    return steps, pending


def unique_keys(rows: DataFrame, keys: tuple[str, ...]) -> bool:
    """True when no key occurs twice in ``rows``.

    It groups by a 64-bit hash of the key (one long to shuffle, whatever the key columns): two
    keys that share a hash count as a repeat, so the answer may be a needless False (the
    caller then dedupes), never a wrong True.
    """
    from pyspark.sql import functions as F

    hashed = rows.groupBy(F.xxhash64(*[F.col(_q(k)) for k in keys]).alias("h"))
    return hashed.count().filter(F.col("count") > 1).isEmpty()


def _with_actions(rows: DataFrame, table: TableInfo, counts: dict[str, int]) -> DataFrame:
    from pyspark.sql import functions as F

    change = F.col("__change_type")
    action = (
        F.when(change.isin(*UPSERT_TYPES), "upsert")
        .when(change.isin(*DELETE_TYPES), "delete")
        .when(change == "P", "archive")
    )
    acted = rows.filter(change.isin(*UPSERT_TYPES, *DELETE_TYPES, "P")).withColumn(ACTION, action)
    if counts.get("B"):
        acted = acted.unionByName(moved_keys(rows, table.keys).withColumn(ACTION, F.lit("delete")))
    return acted


def moved_keys(rows: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """BEFORE rows whose paired UPDATE has another key: their old key is to be deleted."""
    from pyspark.sql import functions as F

    b = rows.filter(F.col("__change_type") == "B").alias("b")
    u = rows.filter(F.col("__change_type") == "U").alias("u")
    same_rowid = F.col("b.__source_rowid") == F.col("u.__source_rowid")
    next_offset = (
        F.col("b.__source_rowid").isNull()
        & (F.col("b.partition") == F.col("u.partition"))
        & (F.col("u.offset") == F.col("b.offset") + 1)
    )
    paired = (F.col("b.__change_time") == F.col("u.__change_time")) & (same_rowid | next_offset)
    same_key = [F.col(f"b.{_q(k)}").eqNullSafe(F.col(f"u.{_q(k)}")) for k in keys]
    moved = ~_all(same_key)
    return (
        b.join(u, paired, "inner")
        .filter(moved)
        .select("b.*")
        .dropDuplicates(["partition", "offset"])
    )


def latest_per_key(
    rows: DataFrame, keys: tuple[str, ...], payload: Sequence[str] | None = None
) -> DataFrame:
    """One row per key: the last by (``__change_time``, partition, offset).

    Within one transaction the last row wins outright (DESIGN): only the last row of each
    transaction counts. With ``payload`` (the table's non-technical columns) ``rows`` carry
    an ``__action``, and a last row that archives (``P``) takes the payload the batch's
    earlier transactions leave it, so the result does not depend on where micro-batches end.
    With N the latest earlier transaction's row that does not archive:

    - N upserts: action ``upsert_archive``, N's payload with the archive's technical fields
      (every archive after N keeps N's payload);
    - N deletes: action ``delete_archive``, the payload of the first archive after N (it
      finds no row and stores its own image; the later ones keep it);
    - no N: action ``archive`` with the payload of the batch's first archive, inserted when
      no row is stored (a stored row keeps its payload);

    and ``__base_time`` holds N's ``__change_time``: the MERGE applies the fold only over
    stored rows that are not newer than N, else it archives the stored row.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy(*[F.col(_q(k)) for k in keys])
    ordered = by_key.orderBy(*[F.col(c).desc() for c in _ORDER])
    ranked = rows.withColumn("__rank", F.row_number().over(ordered))
    if payload is None:
        return ranked.filter("__rank = 1").drop("__rank")
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    later_time = F.lag("__change_time").over(ordered)  # of the next row in time, if any
    last_of_txn = later_time.isNull() | (later_time != F.col("__change_time"))  # one per txn
    txns = ranked.withColumn("__txn_last", last_of_txn).filter("__txn_last").drop("__txn_last")
    archives = F.col(ACTION) == "archive"
    fields = [F.col(_q(c)) for c in payload if c in rows.columns]
    base = F.struct(*fields, F.col("__change_time"), F.col(ACTION))
    txns = txns.withColumn(BASE, F.first(F.when(~archives, base), ignorenulls=True).over(whole))
    after_base = F.col(BASE).isNull() | (F.col("__change_time") > F.col(f"{BASE}.__change_time"))
    first_archive = F.last(F.when(archives & after_base, F.struct(*fields)), ignorenulls=True)
    last = txns.withColumn("__first_p", first_archive.over(whole)).filter("__rank = 1")
    folded = archives & F.col(BASE).isNotNull()
    take_base = folded & (F.col(f"{BASE}.{ACTION}") == "upsert")
    columns = [
        F.when(take_base, F.col(f"{BASE}.{_q(c)}"))
        .when(archives, F.col(f"__first_p.{_q(c)}"))
        .otherwise(F.col(_q(c)))
        .alias(c)
        if c in set(payload)
        else F.col(_q(c))
        for c in rows.columns
        if c != ACTION
    ]
    action = F.when(folded, F.concat(F.col(f"{BASE}.{ACTION}"), F.lit("_archive")))
    return last.select(
        *columns,
        action.otherwise(F.col(ACTION)).alias(ACTION),
        F.when(folded, F.col(f"{BASE}.__change_time")).alias(BASE_TIME),
    )


def conform(rows: DataFrame, table: TableInfo, extra: tuple[str, ...] = ()) -> DataFrame:
    """Select the table's columns, cast to the table's types (null for absent ones)."""
    from pyspark.sql import functions as F

    present = set(rows.columns)
    columns = [
        (F.col(_q(name)) if name in present else F.lit(None)).cast(dtype).alias(name)
        for name, dtype in table.columns.items()
    ]
    return rows.select(*columns, *[F.col(c) for c in extra])


def _merge(
    latest: DataFrame,
    table: TableInfo,
    app_id: str,
    version: int,
    key_range: tuple[object, object] | None = None,
    small: SmallChanges | None = None,
) -> None:
    """One MERGE of the per-key rows (:mod:`lakehouse_writer.merge`), by ``small`` if it can."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    spark = latest.sparkSession
    source = conform(latest, table, extra=(ACTION, BASE_TIME))
    if small is not None:
        rules = _clauses(table, DATAFUSION, key_range)
        if small.merge(source.toArrow, table, rules, app_id, version):
            return
    clauses = _clauses(table, SPARK)
    on = F.expr(clauses.on)
    if key_range is not None:  # a target-only predicate: Delta skips files outside the range
        first = table.keys[0]
        lo, hi = (F.lit(v).cast(table.columns[first]) for v in key_range)
        on = on & F.col(f"t.{_q(first)}").between(lo, hi)
    with txn.delta_txn(spark, app_id, version):
        (
            DeltaTable.forPath(spark, table.path)
            .alias("t")
            .merge(source.alias("s"), on)
            .whenMatchedDelete(clauses.delete)
            .whenMatchedUpdate(clauses.replace, set=clauses.every)
            .whenMatchedUpdate(clauses.archive, set=clauses.technical)
            .whenNotMatchedInsert(clauses.insert, values=clauses.every)
            .execute()
        )


def _clauses(
    table: TableInfo, dialect: Dialect, key_range: tuple[object, object] | None = None
) -> MergeClauses:
    return merge_clauses(list(table.columns), table.keys, _TECHNICAL, dialect, key_range)


def _payload(table: TableInfo) -> list[str]:
    return [c for c in table.columns if c not in _TECHNICAL]


def _is_empty(spark: SparkSession, table: TableInfo) -> bool:
    """True when the table holds no rows.

    A table this writer created is empty at version 0 (the creation commit), and so is one
    whose latest version has no data files (its checksum says so): log lookups. Otherwise a
    Spark job looks.
    """
    if (table.created and last_log_version(spark, table.path) == 0) or no_data_files(
        spark, table.path
    ):
        return True
    return bool(spark.read.format("delta").load(table.path).isEmpty())


def _timestamp(truncate: Truncate) -> Column:
    from pyspark.sql import functions as F

    return F.timestamp_micros(F.lit(truncate.time_us))


def _union(a: DataFrame | None, b: DataFrame | None) -> DataFrame | None:
    if a is None or b is None:
        return a if b is None else b
    return a.unionByName(b)


def _all(conditions: list[Column]) -> Column:
    from functools import reduce

    return reduce(lambda x, y: x & y, conditions)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
