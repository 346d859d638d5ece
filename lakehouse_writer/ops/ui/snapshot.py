"""What the status page shows, as one JSON document: ``GET /api/overview``.

Read from what the writer leaves behind, so it works whether the writer runs or not: the
status file and the history file in the checkpoint (:mod:`lakehouse_writer.runtime.status`,
:mod:`lakehouse_writer.ops.history`), the tables' Delta logs and the system tables
(:mod:`lakehouse_writer.ops.overview`). The document:

- ``writer``: state, when the status was written and how long ago, last batch, pending commits,
  error, and the problems ``lakehouse-writer status`` would name;
- ``tables``: per table its rows, last commit, newest change time and freshness (seconds from
  that change to ``generated_at``), and whether it is stopped (with the error);
- ``topics``: per topic the lag now and, per :data:`~lakehouse_writer.ops.history.STEP_S`
  bucket of the last hour, the lag and the throughput (offsets read per second);
- ``runs``: the flows' latest runs from ``_execution_log``;
- ``rejected``: ``_rejected`` rows per table and error, with a sample.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse_writer.ops.admin import StatusReport, read_report
from lakehouse_writer.ops.history import STEP_S, Bucket, read_history
from lakehouse_writer.ops.overview import (
    RejectedGroup,
    Run,
    TableFacts,
    TableReader,
    read_rejected,
    read_runs,
    table_names,
)
from lakehouse_writer.runtime.status import status_age_s

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["Overview"]

_REUSE_S = 1.0  # a document this young is served again: many viewers, one read


@dataclass
class _Cached:
    at: float
    document: dict[str, Any]


class Overview:
    """Builds the page's document for one writer (its lakehouse and checkpoint).

    Args:
        settings: Where the lakehouse and the checkpoint are.
        spark: A session for paths only Hadoop opens; None for local paths.
        refresh_s: How often the page asks again (told to the page in the document).
        clock: Unix time now (tests pass their own).
    """

    def __init__(
        self,
        settings: LakehouseSettings,
        spark: SparkSession | None = None,
        refresh_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._spark = spark
        self._refresh_s = refresh_s
        self._clock = clock
        self._tables = TableReader(settings.lakehouse_path)
        self._lock = threading.Lock()
        self._cached: _Cached | None = None

    def document(self) -> dict[str, Any]:
        """The page's document (one read serves the requests of :data:`_REUSE_S` seconds)."""
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached.at > _REUSE_S:
                self._cached = _Cached(now, self._read(now))
            return self._cached.document

    def _read(self, now: float) -> dict[str, Any]:
        lakehouse = self._settings.lakehouse_path
        report = read_report(self._settings, self._spark)
        status = report.status or {}
        names = sorted(
            {*table_names(lakehouse), *report.stopped_tables, *(status.get("rows_applied") or {})}
        )
        facts = {name: self._tables.facts(name) for name in names}
        return {
            "generated_at": _iso(datetime.fromtimestamp(now, UTC)),
            "refresh_s": self._refresh_s,
            "step_s": STEP_S,
            "writer": _writer(report),
            "tables": [_table(n, facts[n], report, now) for n in names],
            "topics": _topics(
                status.get("lag") or {},
                _epoch(status.get("updated_at")),
                read_history(self._settings.checkpoint_path, now),
            ),
            "runs": [_run(r) for r in read_runs(lakehouse)],
            "rejected": [_rejected(g) for g in read_rejected(lakehouse)],
        }


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def _writer(report: StatusReport) -> dict[str, Any]:
    status = report.status or {}
    return {
        "state": status.get("state") or ("unreadable" if report.unreadable else "unknown"),
        "updated_at": status.get("updated_at"),
        "age_s": status_age_s(status) if status else None,
        "last_batch_id": status.get("last_batch_id"),
        "last_batch_time": status.get("last_batch_time") or None,
        "pending_commits": status.get("pending_commits", 0),
        "error": status.get("error") or report.unreadable,
        "problems": report.problems,
        "healthy": report.exit_code == 0,
    }


def _table(name: str, facts: TableFacts | None, report: StatusReport, now: float) -> dict[str, Any]:
    newest = facts.newest_change if facts else None
    return {
        "name": name,
        "rows": facts.rows if facts else None,
        "version": facts.version if facts else None,
        "committed_at": _iso(facts.committed_at) if facts else None,
        "operation": facts.operation if facts else None,
        "newest_change": _iso(newest),
        "freshness_s": round(now - newest.timestamp(), 3) if newest else None,
        "stopped": name in report.stopped_tables,
        "stopped_error": report.stopped_tables.get(name),
    }


def _epoch(iso: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(iso)).timestamp() if iso else None
    except ValueError:
        return None


def _topics(
    lag: dict[str, int], lag_at: float | None, buckets: list[Bucket]
) -> list[dict[str, Any]]:
    """Per topic the lag now and the series of the buckets, ended by the status file's lag.

    The history file is written when a bucket opens; the status file holds the lag of the
    latest progress report, so the lag line ends at the value the heading shows.
    """
    names = sorted({*lag, *(t for b in buckets for t in (*b.lag, *b.read))})
    newer = lag_at is not None and (not buckets or lag_at > buckets[-1].start)
    return [
        {
            "topic": topic,
            "lag": lag.get(topic),
            "series": [
                *(
                    {
                        "t": b.start,
                        "lag": b.lag.get(topic),
                        "rows_per_s": round(b.read.get(topic, 0) / STEP_S, 3),
                    }
                    for b in buckets
                ),
                *([{"t": lag_at, "lag": lag.get(topic), "rows_per_s": None}] if newer else []),
            ],
        }
        for topic in names
    ]


def _run(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "function": run.function,
        "dataflow": run.dataflow,
        "load": run.load,
        "status": run.status,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "duration_s": run.duration_s,
        "rows": run.rows,
        "error": run.error,
    }


def _rejected(group: RejectedGroup) -> dict[str, Any]:
    return {
        "table": group.table,
        "error": group.error,
        "rows": group.rows,
        "sample": {
            "topic": group.topic,
            "partition": group.partition,
            "offset": group.offset,
            "value_hex": group.value_hex,
            "at": _iso(group.last_at),
        },
    }
