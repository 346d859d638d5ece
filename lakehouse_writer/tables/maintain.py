"""Table maintenance: compaction, VACUUM by governance retention, log checkpoints, GDPR.

``lakehouse-writer maintain`` runs one pass over every Delta table of the lakehouse (or the
named ones); :func:`maintain_tables` is the same pass for a caller that holds a session (the
writer between batches: ``budget_s`` bounds it). Per table, in this order:

1. plan (:func:`lakehouse_writer.tables.retention.plan_table`): its small files, its history
   retention (``LAKEHOUSE_HISTORY_RETENTION_HOURS`` or a shorter ``flow.retention_period``)
   and whether a GDPR delete (the ``flow.gdpr_delete`` commit the writer makes after every
   batch with ``G`` rows, :mod:`lakehouse_writer.engines.spark.gdpr`) lies inside that history;
2. set ``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration`` to the
   history retention when they differ (one commit, the first time);
3. compact small files (``OPTIMIZE``) when there are at least ``LAKEHOUSE_COMPACT_MIN_FILES``;
4. VACUUM with the history retention, or ``LAKEHOUSE_GDPR_COMPLETION_HOURS`` while a purge is
   in the history: Delta's 168 h safety check is turned off for that call only;
5. checkpoint the log when commits came after its last checkpoint; the checkpoint also
   deletes log files older than the log retention (Delta rounds that down to whole days).

A table's tombstones (``<lakehouse>/_tombstones/<namespace>/<name>``,
:mod:`lakehouse_writer.rules.tombstones`) are maintained after it, as ``_tombstones/NS.NAME``:
first the tombstones older than ``LAKEHOUSE_TOMBSTONE_RETENTION_HOURS`` are deleted, then the
same steps.

A table that fails is reported with its error and the pass goes on with the others. OPTIMIZE
and a writer's MERGE on the same table conflict (Delta's optimistic concurrency: the later
commit fails); docs/OPERATIONS.md says what that means for a running writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.lines import checkpoint_and_clean_up, latest_snapshot
from lakehouse_writer.runtime.session import quote_name, session_conf
from lakehouse_writer.runtime.storage import is_local
from lakehouse_writer.tables.files import (
    directory_problem,
    find_tables,
    first_log_version,
    is_table,
    stored_files,
    table_path,
)
from lakehouse_writer.tables.manager import GDPR_DELETE_PROPERTY, TOMBSTONES, jvm_delta_log
from lakehouse_writer.tables.retention import MaintainSettings, TablePlan, plan_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "GDPR_MARKER",
    "MaintainSettings",
    "MaintenanceError",
    "TableReport",
    "maintain_command",
    "maintain_table",
    "maintain_tables",
]

log = logging.getLogger(__name__)

# A commit whose userMetadata holds this deleted rows for GDPR (the writer's G rows).
GDPR_MARKER = GDPR_DELETE_PROPERTY
# Delta refuses a VACUUM below the table's deletedFileRetentionDuration unless this is off:
# off only for a GDPR VACUUM, and only for that call.
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"  # OPTIMIZE rewrites smaller ones
# VACUUM lists the table in a job of this many tasks, 10,000 by default: 60-120 s for a table
# of ten files on local[2] (5-11 s with 2). The session's default parallelism instead.
_LIST_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


class MaintenanceError(LakehouseWriterError):
    """A table's maintenance failed; the message names the table and the cause."""


@dataclass
class TableReport:
    """What a pass did to one table (or, with ``dry_run``, would do).

    Attributes:
        table: ``NAMESPACE.NAME`` (a system table: its name).
        path: Its location.
        plan: What was planned (None: the planning failed).
        files_before: Data files of the latest version, before.
        files_after: After (compaction lowers it).
        bytes_before: Their bytes, before.
        bytes_after: After.
        stored_files_before: Files under the table directory outside ``_delta_log`` (data
            files of every version, deletion vectors, Change Data Feed files), before.
        stored_files_after: After (VACUUM lowers it).
        log_versions_removed: Commits deleted from ``_delta_log`` by the log cleanup.
        seconds: Wall time of this table.
        error: Why it failed (None: it did not).
        dry_run: Nothing was changed.
        steps: Seconds per step (plan, properties, compact, vacuum, checkpoint).
    """

    table: str
    path: str
    plan: TablePlan | None = None
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    stored_files_before: int = 0
    stored_files_after: int = 0
    log_versions_removed: int = 0
    seconds: float = 0.0
    error: str | None = None
    dry_run: bool = False
    steps: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time a step into :attr:`steps`."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.steps[name] = round(time.monotonic() - started, 2)

    def line(self) -> str:
        """One line for a terminal."""
        if self.error is not None:
            return f"FAILED {self.table}: {self.error}"
        if self.dry_run:
            return f"plan {self.plan.describe() if self.plan else self.table}"
        return (
            f"{self.table}: files {self.files_before} -> {self.files_after}, bytes "
            f"{self.bytes_before} -> {self.bytes_after}, stored files {self.stored_files_before}"
            f" -> {self.stored_files_after}, log versions removed {self.log_versions_removed}, "
            f"vacuum retain {self.plan.vacuum_hours if self.plan else '-'} h, "
            f"{self.seconds:.1f} s"
        )


def maintain_tables(
    spark: SparkSession,
    lakehouse: str,
    tables: Sequence[str] | None = None,
    settings: MaintainSettings | None = None,
    budget_s: float | None = None,
    dry_run: bool = False,
) -> list[TableReport]:
    """One maintenance pass; a report per table, failed ones with their error.

    Args:
        spark: A session with Delta.
        lakehouse: The lakehouse root.
        tables: ``NAMESPACE.NAME`` of the tables to maintain (None: every table there).
        settings: Default: :class:`MaintainSettings`'s defaults.
        budget_s: No table is started once this many seconds have passed (a started one
            finishes); None: no bound. Tables not reached have no report.
        dry_run: Plan only; change nothing.
    """
    settings = settings or MaintainSettings()
    graves = f"{lakehouse.rstrip('/')}/{TOMBSTONES}"
    if tables is None:
        targets = find_tables(spark, lakehouse)
        kept = find_tables(spark, graves)
    else:
        targets = [(name, table_path(lakehouse, name)) for name in tables]
        kept = [(name, table_path(graves, name)) for name in tables]
        kept = [(name, path) for name, path in kept if is_table(spark, path)]
    targets += [(f"{TOMBSTONES}/{name}", path) for name, path in kept]
    start, reports = time.monotonic(), list[TableReport]()
    for name, path in targets:
        if budget_s is not None and time.monotonic() - start >= budget_s:
            left = len(targets) - len(reports)
            log.info("maintenance budget spent budget_s=%s tables_left=%d", budget_s, left)
            break
        reports.append(maintain_table(spark, name, path, settings, dry_run))
    return reports


def maintain_table(
    spark: SparkSession, name: str, path: str, settings: MaintainSettings, dry_run: bool = False
) -> TableReport:
    """Maintain one table (see the module docstring); a failure is in the report's ``error``."""
    report, started = TableReport(name, path, dry_run=dry_run), time.monotonic()
    try:
        if not is_table(spark, path):
            raise MaintenanceError("no Delta table there", table=name, path=path)
        with report.step("plan"):
            report.files_before, report.bytes_before, properties = _detail(spark, path)
            report.files_after, report.bytes_after = report.files_before, report.bytes_before
            report.stored_files_before = report.stored_files_after = stored_files(spark, path)
            report.plan = plan_table(
                name,
                properties,
                _small_files(spark, path, settings.small_file_bytes),
                _purge_times_ms(spark, path),
                int(time.time() * 1000),
                settings,
            )
        if not dry_run:
            if name.startswith(f"{TOMBSTONES}/"):
                with report.step("tombstones"):
                    _expire_tombstones(spark, path, settings.tombstone_retention_hours)
            _carry_out(spark, path, report.plan, settings, report)
    except Exception as exc:  # one table's failure must not stop the others
        report.error = _cause(exc)
        log.exception("maintenance failed table=%s path=%s", name, path)
    report.seconds = time.monotonic() - started
    log.info("maintenance table=%s %s steps=%s", name, report.line(), report.steps)
    return report


def _expire_tombstones(spark: SparkSession, path: str, hours: float) -> None:
    """Delete the tombstones whose delete is older than ``hours``."""
    from delta.tables import DeltaTable

    cutoff_us = int((time.time() - hours * 3600) * 1_000_000)
    table = DeltaTable.forPath(spark, path)
    table.delete(f"{quote_name('__change_time')} < timestamp_micros({cutoff_us})")


def _carry_out(
    spark: SparkSession,
    path: str,
    plan: TablePlan,
    settings: MaintainSettings,
    report: TableReport,
) -> None:
    from delta.tables import DeltaTable

    first_log = first_log_version(spark, path)
    if plan.properties:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in plan.properties.items())
        with report.step("properties"):
            spark.sql(f"ALTER TABLE delta.{quote_name(path)} SET TBLPROPERTIES ({pairs})")
    table = DeltaTable.forPath(spark, path)
    if plan.compact:
        with (
            report.step("compact"),
            session_conf(spark, _MIN_FILE_SIZE, str(settings.small_file_bytes)),
        ):
            table.optimize().executeCompaction()
    gdpr = plan.vacuum_hours < plan.history_hours
    tasks = str(max(1, spark.sparkContext.defaultParallelism))
    with (
        report.step("vacuum"),
        session_conf(spark, _RETENTION_CHECK, "false" if gdpr else None),
        session_conf(spark, _LIST_PARALLELISM, tasks),
    ):
        table.vacuum(plan.vacuum_hours)
    with report.step("checkpoint"):
        _checkpoint(spark, path)
    report.files_after, report.bytes_after, _ = _detail(spark, path)
    report.stored_files_after = stored_files(spark, path)
    report.log_versions_removed = max(0, first_log_version(spark, path) - first_log)


def _detail(spark: SparkSession, path: str) -> tuple[int, int, dict[str, str]]:
    """Files, bytes and properties of the table's latest version."""
    row = spark.sql(f"DESCRIBE DETAIL delta.{quote_name(path)}").collect()[0]
    return int(row["numFiles"] or 0), int(row["sizeInBytes"] or 0), dict(row["properties"] or {})


def _small_files(spark: SparkSession, path: str, small_bytes: int) -> int:
    """Data files of the latest version smaller than ``small_bytes`` (from the log)."""
    from pyspark.sql import DataFrame

    snapshot = _snapshot(spark, path)
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    return int(files.where(files["size"] < small_bytes).count())


def _purge_times_ms(spark: SparkSession, path: str) -> list[int]:
    """Commit times (epoch ms) of the GDPR deletes in the table's log.

    The writer marks each batch with GDPR deletes by a commit that sets the table property
    :data:`GDPR_MARKER` (whichever engine applied them: after a delta-rs MERGE, which rewrites
    files, the purge may commit nothing). Also counted: a ``REORG ... APPLY (PURGE)`` commit
    (the writer's purge before), and a commit whose ``userMetadata`` holds the marker
    (another tool's delete).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    history = DeltaTable.forPath(spark, path).history()
    purge = (history["operation"] == "REORG") & (
        F.lower(history["operationParameters"]["applyPurge"]) == "true"
    )
    marked = F.coalesce(history["userMetadata"].contains(GDPR_MARKER), F.lit(False)) | (
        (history["operation"] == "SET TBLPROPERTIES")
        & F.coalesce(
            history["operationParameters"]["properties"].contains(GDPR_MARKER), F.lit(False)
        )
    )
    rows = history.where(purge | marked).select(F.unix_millis("timestamp").alias("ms")).collect()
    return [int(r["ms"]) for r in rows]


def _checkpoint(spark: SparkSession, path: str) -> None:
    """Checkpoint the latest version unless it is checkpointed; Delta cleans up the log then."""
    delta_log = jvm_delta_log(spark, path)
    snapshot = _snapshot(spark, path)
    last = delta_log.readLastCheckpointFile()
    if last.isDefined() and int(last.get().version()) >= int(snapshot.version()):
        return
    checkpoint_and_clean_up(spark, delta_log, snapshot)


def _snapshot(spark: SparkSession, path: str) -> Any:
    return latest_snapshot(spark, jvm_delta_log(spark, path))


def _cause(exc: BaseException) -> str:
    """The first line of the error (a Spark error's first line names the Delta condition)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def maintain_command(
    spark_factory: Callable[[], SparkSession],
    lakehouse: str,
    tables: Sequence[str] | None,
    dry_run: bool,
    settings: MaintainSettings,
    out: Callable[[str], None] = print,
) -> int:
    """``lakehouse-writer maintain``: a pass, a line per table; returns the exit code.

    Raises:
        MaintenanceError: ``lakehouse`` is no directory (a typo in a scheduled job must not
            look like a pass over no tables).
    """
    spark = None if is_local(lakehouse) else spark_factory()  # a typo costs no JVM start
    problem = directory_problem(spark, lakehouse)
    if problem is not None:
        raise MaintenanceError(f"the lakehouse {problem}; nothing maintained", lakehouse=lakehouse)
    spark = spark or spark_factory()
    started = time.monotonic()
    reports = maintain_tables(spark, lakehouse, tables, settings, None, dry_run)
    for report in reports:
        out(report.line())
    failed = [r.table for r in reports if r.error is not None]
    verb = "planned" if dry_run else "maintained"
    out(
        f"{verb} {len(reports) - len(failed)} of {len(reports)} tables in "
        f"{time.monotonic() - started:.1f} s" + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0
