"""The status file ``writer_status.json`` in the checkpoint directory, and lag from progress.

The file says what the writer is doing (``state``: running, stopped, drained, failed), why
it failed (``error``: the root cause; ``error_trace``: the file with the whole trace), what
its last batch did, how far behind the latest offsets it is, which commits still wait for
rows and which tables are stopped. It is replaced atomically, so a reader never sees half,
on the checkpoint's own file system (a local folder or any Hadoop URI:
:mod:`lakehouse_writer.storage`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lakehouse_writer.storage import CheckpointFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STATUS_FILE = "writer_status.json"
WriterRunState = Literal["running", "stopped", "drained", "failed"]


@dataclass
class BatchStats:
    """What the writer and its last batch did (for the log line and the status file)."""

    state: WriterRunState = "running"
    batch_id: int = -1
    rows: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    lag_batch_id: int = -1
    finished_at: str = ""
    pending_commits: int = 0
    stopped_tables: dict[str, str] = field(default_factory=dict)
    error: str = ""
    error_trace: str = ""


def write_status(checkpoint: str, stats: BatchStats, spark: SparkSession | None = None) -> None:
    """Write the status JSON file into the checkpoint directory (atomically).

    Args:
        checkpoint: The checkpoint directory: a local path or any Hadoop URI.
        stats: What to write.
        spark: The session that opens a URI; None: the active one (local paths need none).

    Raises:
        StorageError: The file cannot be written (the message names it).
    """
    text = json.dumps(
        {
            "state": stats.state,
            "last_batch_id": stats.batch_id,
            "last_batch_time": stats.finished_at,
            "rows_applied": stats.rows,
            "rows_rejected": stats.rejected,
            "lag": stats.lag,
            "lag_batch_id": stats.lag_batch_id,
            "pending_commits": stats.pending_commits,
            "stopped_tables": stats.stopped_tables,
            "error": stats.error or None,
            "error_trace": stats.error_trace or None,
        },
        indent=2,
    )
    CheckpointFiles(checkpoint, spark).replace(STATUS_FILE, text)


def read_status(checkpoint: str, spark: SparkSession | None = None) -> dict[str, Any] | None:
    """The status file's content, or None before the writer first wrote it."""
    text = CheckpointFiles(checkpoint, spark).read(STATUS_FILE)
    return json.loads(text) if text else None


def record_lag(query: StreamingQuery, stats: BatchStats, checkpoint: str) -> None:
    """Put the lag of the query's last progress into ``stats`` and the status file, once."""
    try:
        progress = query.lastProgress
        if not progress or progress.get("batchId", -1) == stats.lag_batch_id:
            return
        stats.lag, stats.lag_batch_id = lag_of(progress), int(progress["batchId"])
        log.info(
            "progress batch=%d lag=%s rows_per_s=%s",
            stats.lag_batch_id,
            stats.lag,
            progress.get("processedRowsPerSecond"),
        )
        write_status(checkpoint, stats)
    except Exception as exc:  # noqa: BLE001 - progress reporting must never stop the writer
        log.warning("lag not recorded error=%s: %s", type(exc).__name__, exc)


def lag_of(progress: dict[str, Any] | None) -> dict[str, int]:
    """Offsets behind the latest offset, per topic, from a query progress report."""
    lag: dict[str, int] = {}
    for source in (progress or {}).get("sources", []):
        end, latest = (_offsets(source.get(k)) for k in ("endOffset", "latestOffset"))
        for (topic, partition), last in latest.items():
            behind = max(0, last - end.get((topic, partition), 0))
            lag[topic] = lag.get(topic, 0) + behind
    return lag


def _offsets(raw: Any) -> dict[tuple[str, str], int]:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        log.warning("unreadable offsets in query progress raw=%r", raw)
        return {}
    if not isinstance(data, dict):
        return {}
    return {(t, p): int(o) for t, parts in data.items() for p, o in parts.items()}
