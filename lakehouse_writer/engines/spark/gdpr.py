"""GDPR deletes (``G`` rows): after their MERGE, no current data file may still hold the row.

A MERGE with deletion vectors deletes a row by marking it in a vector beside its file: the
row is still in the file. So are the older images of its key that earlier MERGEs marked
(an UPDATE leaves the old image behind its vector, a DELETE the deleted row), in files the
GDPR MERGE may not touch at all. :func:`purge_deleted_rows` therefore rewrites the table so
that no current file carries a deletion vector, whichever key it hides, then marks the table
(:data:`~lakehouse_writer.tables.manager.GDPR_DELETE_PROPERTY`) for ``lakehouse-writer maintain``,
which VACUUMs the older files within ``LAKEHOUSE_GDPR_COMPLETION_HOURS``.

Why not ``REORG TABLE ... APPLY (PURGE)``, Delta's own purge: from Delta 4.0.1 on (so 4.4, the
writer's) it reads the files' Parquet footers in a Spark task that asks for
``SparkSession.active`` (``ReorgTableHelper.filterParquetFilesOnExecutors``), which only the
driver's JVM has: it works on ``local[N]`` and fails on every real cluster
(delta-io/delta#5780), and no setting skips that check. Of what Delta offers instead:

- a table without ``CLUSTER BY``: ``OPTIMIZE ... ZORDER BY (first key column)``. Z-ordering
  puts every file of the table in one bin and rewrites it, a lone file too (plain
  compaction skips a bin of one file, so ``optimize.maxDeletedRowsRatio = 0`` leaves a
  table's only file with a deletion vector as it is). One OPTIMIZE commit, ``dataChange =
  false`` (no Change Data Feed rows), optimistic like any commit, and the files come out
  sorted by the key, which the writer's MERGEs skip files by;
- a clustered table refuses ``ZORDER BY``, and ``OPTIMIZE ... FULL`` keeps files of a
  clustered ZCube as they are: its current version is read and written back with
  ``dataChange = false`` (Delta's documented way to rearrange files), and its clustering
  columns, which that overwrite drops, are set again (``ALTER TABLE ... CLUSTER BY``; the
  next OPTIMIZE clusters the files). That write reads the table's latest version when it
  starts, so it assumes what DESIGN says: this writer is the only one that changes the
  table's rows.

Both rewrite every file of the table, not only those with deletion vectors (figures:
docs/PERFORMANCE.md). A table with no deletion vector left (delta-rs merged the rows, or the
table has none) is not rewritten. A rewrite that fails, or leaves a deletion vector, raises
:class:`GdprPurgeError`: the writer fails that table's batch with the reason, not the run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lakehouse_writer.errors import ApplyError
from lakehouse_writer.runtime import lines
from lakehouse_writer.runtime.failure import root_cause
from lakehouse_writer.runtime.session import quote_name, session_conf
from lakehouse_writer.tables.manager import GDPR_DELETE_PROPERTY, jvm_delta_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["GdprPurgeError", "files_with_deleted_rows", "purge_deleted_rows"]

log = logging.getLogger(__name__)

# ZORDER BY refuses a column without file statistics unless this is off; the key column may
# have none (the writer collects them for 32 columns): Z-ordering is still a full rewrite.
_ZORDER_STATS_CHECK = "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled"
_CLUSTERING_COLUMNS = "clusteringColumns"  # of DESCRIBE DETAIL


class GdprPurgeError(ApplyError):
    """A GDPR delete's rows are deleted but some current data file may still hold them."""


def purge_deleted_rows(spark: SparkSession, table: TableInfo, batch_id: int) -> int:
    """Rewrite ``table`` so no current file keeps a deleted row; mark the GDPR delete.

    Call it after the MERGE of a batch with ``G`` rows (see the module docstring).

    Returns:
        How many files held deleted rows before (0: nothing was rewritten).

    Raises:
        GdprPurgeError: The rewrite or the mark failed, or files with deleted rows remain;
            the message names the table and the cause.
    """
    name, path = table.ref.qualified, table.path
    try:
        holding = files_with_deleted_rows(spark, path)
        if holding:
            how = _rewrite(spark, table)
            left = files_with_deleted_rows(spark, path)
            if left:
                raise GdprPurgeError(
                    f"{how} left {left} files holding deleted rows",
                    table=name,
                    path=path,
                    batch=batch_id,
                )
        target = f"delta.{quote_name(path)}"
        spark.sql(
            f"ALTER TABLE {target} SET TBLPROPERTIES ('{GDPR_DELETE_PROPERTY}' = '{batch_id}')"
        )
    except GdprPurgeError:
        raise
    except Exception as exc:  # a Spark or Delta failure: this table's batch fails, not the run
        raise GdprPurgeError(
            "GDPR purge failed: the batch's rows are applied, but current data files may "
            f"still hold the rows it deleted ({root_cause(exc)}); the next batch with a "
            "GDPR delete purges them again",
            table=name,
            path=path,
            batch=batch_id,
        ) from exc
    log.info(
        "gdpr purge table=%s path=%s batch=%d files_rewritten_for=%d "
        "(older versions keep the rows until maintain)",
        name,
        path,
        batch_id,
        holding,
    )
    return holding


def files_with_deleted_rows(spark: SparkSession, path: str) -> int:
    """Current data files of the table at ``path`` with a deletion vector (from its log)."""
    from pyspark.sql import DataFrame

    snapshot = lines.latest_snapshot(spark, jvm_delta_log(spark, path))
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    return int(files.where(files["deletionVector"].isNotNull()).count())


def _rewrite(spark: SparkSession, table: TableInfo) -> str:
    """Rewrite every file of ``table`` (see the module docstring); returns what it ran."""
    target = f"delta.{quote_name(table.path)}"
    clustering = spark.sql(f"DESCRIBE DETAIL {target}").collect()[0][_CLUSTERING_COLUMNS]
    if clustering:
        frame = spark.read.format("delta").load(table.path)
        rewrite = frame.write.format("delta").mode("overwrite").option("dataChange", "false")
        rewrite.save(table.path)
        # the overwrite drops the clustering columns (clusterBy on the writer too): set again
        spark.sql(
            f"ALTER TABLE {target} CLUSTER BY ({', '.join(quote_name(c) for c in clustering)})"
        )
        return "a rewrite of the clustered table (dataChange=false)"
    with session_conf(spark, _ZORDER_STATS_CHECK, "false"):
        spark.sql(f"OPTIMIZE {target} ZORDER BY ({quote_name(table.keys[0])})")
    return "OPTIMIZE ZORDER BY"


def _jvm(spark: SparkSession) -> Any:
    return spark._jvm  # None only on Spark Connect, which the writer refuses
