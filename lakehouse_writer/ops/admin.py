"""``lakehouse-writer status`` and ``lakehouse-writer resume-table``: an operator's commands.

``status`` prints the status file of the checkpoint (:mod:`lakehouse_writer.runtime.status`) and the
tables stopped for its writer instance in ``_writer_state`` (:mod:`lakehouse_writer.commit.stopped`;
the status file's own list when the lakehouse has no state yet), and exits 0 when the writer
is healthy, 1 when it failed, went silent while ``running``, or a table is stopped, 3 when
there is no status yet, 4 when the status file is there but unreadable. ``resume-table``
resumes a stopped table (exit 0) or says why not (exit 1). Local paths need no JVM; a Hadoop
URI starts a Spark session first.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.stopped import StateTable, instance_of, resume_table
from lakehouse_writer.ops.watch import monitor_group_of
from lakehouse_writer.runtime.status import (
    HEARTBEAT_S,
    STATUS_FILE,
    StatusUnreadable,
    read_status,
    status_age_s,
)
from lakehouse_writer.runtime.storage import is_local

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["StatusReport", "read_report", "resume_command", "status_command"]

EXIT_OK, EXIT_UNHEALTHY, EXIT_NO_STATUS, EXIT_UNREADABLE = 0, 1, 3, 4
_SILENT_S = 3 * HEARTBEAT_S  # a running writer writes its status at least every HEARTBEAT_S


@dataclass
class StatusReport:
    """What ``lakehouse-writer status`` shows.

    Attributes:
        checkpoint: The checkpoint directory.
        status: The status file's content (None: none yet).
        stopped_tables: Stopped tables of this writer instance, with their errors.
        stopped_from: Where they were read: ``_writer_state`` or the status file.
        instance: The writer instance id (None: no writer ran with this checkpoint).
        monitor_group: The monitoring consumer group (None: turned off or unknown).
        silent_s: Seconds since a ``running`` status was written, when past the heartbeat.
        problems: Why the writer is not healthy (empty: it is).
        unreadable: Why the status file could not be read (None: it could, or is absent).
    """

    checkpoint: str
    status: dict[str, Any] | None
    stopped_tables: dict[str, str] = field(default_factory=dict)
    stopped_from: str = "_writer_state"
    instance: str | None = None
    monitor_group: str | None = None
    silent_s: float | None = None
    problems: list[str] = field(default_factory=list)
    unreadable: str | None = None

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 failed/silent/a table stopped, 3 no status yet, 4 unreadable."""
        if self.unreadable is not None:
            return EXIT_UNREADABLE
        if self.problems:
            return EXIT_UNHEALTHY
        return EXIT_NO_STATUS if self.status is None else EXIT_OK


def read_report(settings: LakehouseSettings, spark: SparkSession | None = None) -> StatusReport:
    """The status of the writer of ``settings.checkpoint_path`` (read only)."""
    checkpoint = settings.checkpoint_path
    try:
        status, unreadable = read_status(checkpoint, spark), None
    except StatusUnreadable as exc:
        status, unreadable = None, str(exc)
    report = StatusReport(checkpoint, status, instance=instance_of(checkpoint, spark))
    report.unreadable = unreadable
    state = StateTable(settings.lakehouse_path, spark)
    if report.instance is not None and state.exists():
        stopped = [s for s in state.stopped() if s.instance == report.instance]
        report.stopped_tables = {s.table: s.error for s in stopped}
    elif status:
        report.stopped_tables = dict(status.get("stopped_tables") or {})
        report.stopped_from = STATUS_FILE
    if report.instance is not None:
        report.monitor_group = monitor_group_of(settings, report.instance)
    _judge(report)
    return report


def _judge(report: StatusReport) -> None:
    status = report.status or {}
    if status.get("state") == "failed":
        report.problems.append(f"the writer failed: {status.get('error') or 'no cause recorded'}")
    age = status_age_s(status) if status.get("state") == "running" else None
    if age is not None and age > _SILENT_S:
        report.silent_s = age
        report.problems.append(
            f"the status says running but was last written {age:.0f} s ago (a running "
            f"writer writes it every {HEARTBEAT_S:.0f} s): the writer may be gone"
        )
    for table in sorted(report.stopped_tables):
        report.problems.append(f"table {table} is stopped; fix it, then resume-table {table}")


def render_text(report: StatusReport) -> str:
    """The report for a terminal."""
    status = report.status
    if report.unreadable is not None:
        return f"status unreadable: {report.unreadable}"
    if status is None:
        return (
            f"no status yet: {report.checkpoint}/{STATUS_FILE} does not exist (the writer "
            "has not finished a batch with this checkpoint, or the path is wrong)"
        )
    age = status_age_s(status)
    lines = [
        f"state: {status.get('state')}"
        + (f" (written {age:.0f} s ago)" if age is not None else ""),
        f"last batch: {status.get('last_batch_id')} at {status.get('last_batch_time') or '-'}",
        f"rows applied (last batch): {_pairs(status.get('rows_applied'))}",
        f"rows rejected (last batch): {status.get('rows_rejected', 0)}",
        f"lag (offsets): {_pairs(status.get('lag'))}",
        f"pending commits: {status.get('pending_commits', 0)}",
        f"stopped tables ({len(report.stopped_tables)}, from {report.stopped_from}):"
        + ("" if report.stopped_tables else " none"),
        *(f"  {t}: {e}" for t, e in sorted(report.stopped_tables.items())),
    ]
    slow = status.get("off_fast_path") or {}
    if slow:  # written by Spark, not delta-rs in the driver: slower, same result
        lines.append(f"tables off the fast path ({len(slow)}):")
        lines += [f"  {t}: {reason}" for t, reason in sorted(slow.items())]
    if status.get("error"):
        lines.append(f"error: {status['error']}")
        lines.append(f"trace: {status.get('error_trace') or '-'}")
    if report.monitor_group:
        lines.append(f"monitor group: {report.monitor_group}")
    lines += [f"PROBLEM: {p}" for p in report.problems]
    return "\n".join(lines)


def _pairs(values: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((values or {}).items())) or "-"


def status_command(
    settings: LakehouseSettings, session: Callable[[], SparkSession], as_json: bool = False
) -> int:
    """Print the writer's status; return the exit code (see :attr:`StatusReport.exit_code`)."""
    report = read_report(settings, _session_for(settings, session))
    if as_json:
        print(json.dumps({**asdict(report), "exit_code": report.exit_code}, indent=2))
    else:
        print(render_text(report))
    return report.exit_code


def resume_command(
    settings: LakehouseSettings, session: Callable[[], SparkSession], table: str, force: bool
) -> int:
    """Resume ``table``; return 0 (a refusal raises :class:`~.stopped.ResumeRefused`)."""
    spark = _session_for(settings, session)
    stopped = resume_table(settings.lakehouse_path, settings.checkpoint_path, table, spark, force)
    print(
        f"resumed {table} (it was stopped by: {stopped.error}). The writer's next start "
        "applies its rows again; rows rejected while it was stopped stay in _rejected.",
        file=sys.stdout,
    )
    return EXIT_OK


def _session_for(
    settings: LakehouseSettings, session: Callable[[], SparkSession]
) -> SparkSession | None:
    """A Spark session when a path needs Hadoop; None for local paths (no JVM)."""
    local = is_local(settings.checkpoint_path) and is_local(settings.lakehouse_path)
    return None if local else session()
