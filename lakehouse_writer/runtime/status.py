"""The status file ``writer_status.json`` in the checkpoint directory, and lag from progress.

The file says what the writer is doing (``state``: running, stopped, drained, failed), why
it failed (``error``: the root cause; ``error_trace``: the file with the whole trace), what
its last batch did, how far behind the latest offsets it is, which commits still wait for
rows and which tables are stopped; ``updated_at`` is when it was last written (a running
writer rewrites it at least every :data:`HEARTBEAT_S` seconds, so a ``running`` file much
older than that was left by a writer that died). It is replaced atomically, so a reader
never sees half, on the checkpoint's own file system (a local folder or any Hadoop URI:
:mod:`lakehouse_writer.runtime.storage`).

Whatever watches the writer in-process (the metrics endpoint, the monitoring consumer
group: :mod:`lakehouse_writer.ops.watch`) registers a :class:`StatusObserver` with
:func:`observed`; it sees every status written and every query progress recorded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.lines import progress_dict
from lakehouse_writer.runtime.storage import CheckpointFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STATUS_FILE = "writer_status.json"
HEARTBEAT_S = 30.0  # a running writer rewrites its status at least this often
WriterRunState = Literal["running", "stopped", "drained", "failed"]
Partition = tuple[str, int]


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
    off_fast_path: dict[str, str] = field(default_factory=dict)  # table -> why Spark writes it
    error: str = ""
    error_trace: str = ""
    written: float = field(default=0.0, repr=False, compare=False)  # monotonic, last write
    progress_seen: str = field(default="", repr=False, compare=False)  # its timestamp


class StatusObserver(Protocol):
    """Something that watches the writer in-process (metrics, the monitoring group)."""

    def on_status(self, stats: BatchStats) -> None:
        """The writer wrote ``stats`` to its status file."""

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """The streaming query finished a batch; ``progress`` is Spark's report of it."""


_observers: list[StatusObserver] = []


@contextmanager
def observed(*observers: StatusObserver) -> Iterator[None]:
    """Let ``observers`` see every status written and progress recorded inside the block."""
    _observers.extend(observers)
    try:
        yield
    finally:
        for observer in observers:
            _observers.remove(observer)


def _notify(method: str, value: Any) -> None:
    for observer in list(_observers):
        try:
            getattr(observer, method)(value)
        except Exception as exc:  # noqa: BLE001 - watching must never stop the writer
            name = type(observer).__name__
            log.warning("%s of %s failed error=%s: %s", method, name, type(exc).__name__, exc)


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
            "off_fast_path": stats.off_fast_path,
            "error": stats.error or None,
            "error_trace": stats.error_trace or None,
            "updated_at": datetime.now(UTC).isoformat(),
        },
        indent=2,
    )
    CheckpointFiles(checkpoint, spark).replace(STATUS_FILE, text)
    stats.written = time.monotonic()
    _notify("on_status", stats)


class StatusUnreadable(LakehouseWriterError):
    """The status file is there but holds no status (cut short, or not the writer's)."""


def read_status(checkpoint: str, spark: SparkSession | None = None) -> dict[str, Any] | None:
    """The status file's content, or None before the writer first wrote it.

    Raises:
        StatusUnreadable: The file is not a JSON object (the writer replaces it whole, so
            it was cut or written by something else); names the file.
    """
    files = CheckpointFiles(checkpoint, spark)
    text = files.read(STATUS_FILE)
    if not text:
        return None
    try:
        status = json.loads(text)
    except ValueError as exc:
        raise StatusUnreadable(
            f"the status file is not JSON ({exc}); it was cut short or written by something "
            "else. A running writer writes it again within its heartbeat; else delete it",
            file=files.where(STATUS_FILE),
        ) from exc
    if not isinstance(status, dict):
        raise StatusUnreadable(
            "the status file holds no JSON object", file=files.where(STATUS_FILE)
        )
    return status


def forget_stopped(checkpoint: str, table: str, spark: SparkSession | None = None) -> bool:
    """Take ``table`` out of the status file's stopped tables; True when it was there.

    For ``lakehouse-writer resume-table``, while no writer runs on ``checkpoint``.
    """
    status = read_status(checkpoint, spark)
    if not status or table not in (status.get("stopped_tables") or {}):
        return False
    del status["stopped_tables"][table]
    status["updated_at"] = datetime.now(UTC).isoformat()
    CheckpointFiles(checkpoint, spark).replace(STATUS_FILE, json.dumps(status, indent=2))
    return True


def status_age_s(status: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since the status file was last written (None: a file of an older writer)."""
    try:
        updated = datetime.fromisoformat(str(status["updated_at"]))
    except (KeyError, ValueError):
        return None
    return ((now or datetime.now(UTC)) - updated).total_seconds()


def record_lag(query: StreamingQuery, stats: BatchStats, checkpoint: str) -> None:
    """Record the query's new progress reports: lag into ``stats`` and the status file.

    Observers see each report not seen before (several batches may end between two calls).
    With no new report, the status file is rewritten once :data:`HEARTBEAT_S` has passed.
    """
    try:
        fresh = _new_progress(query, stats.progress_seen)
        if not fresh:
            if stats.written and time.monotonic() - stats.written > HEARTBEAT_S:
                write_status(checkpoint, stats)  # the heartbeat: this writer is alive
            return
        for progress in fresh:
            _notify("on_progress", progress)
        progress = fresh[-1]
        stats.progress_seen = str(progress.get("timestamp", ""))
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


def _new_progress(query: StreamingQuery, seen: str) -> list[dict[str, Any]]:
    """The query's progress reports later than timestamp ``seen``, oldest first.

    The last report alone is asked for first (cheap); the recent ones (up to 100, through
    py4j) only when it is new. ISO instants in UTC compare as text. Each is the report's own
    JSON: PySpark 4.1's ``SourceProgress`` holds a Kafka source's offsets as ``str()`` of the
    parsed object (a Python repr, not JSON), its ``json`` the offsets as Spark wrote them.
    """
    last = query.lastProgress
    if not last or str(last.get("timestamp", "")) <= seen:
        return []
    fresh = [p for p in query.recentProgress if str(p.get("timestamp", "")) > seen]
    return [progress_dict(p) for p in fresh]


def lag_of(progress: Mapping[str, Any] | None) -> dict[str, int]:
    """Offsets behind the latest offset, per topic, from a query progress report."""
    lag: dict[str, int] = {}
    for (topic, _), behind in partition_lag(progress).items():
        lag[topic] = lag.get(topic, 0) + behind
    return lag


def partition_lag(progress: Mapping[str, Any] | None) -> dict[Partition, int]:
    """Offsets behind the latest offset, per topic partition, from a query progress report."""
    lag: dict[Partition, int] = {}
    for source in (progress or {}).get("sources", []):
        end, latest = (_offsets(source.get(k)) for k in ("endOffset", "latestOffset"))
        for key, last in latest.items():
            lag[key] = lag.get(key, 0) + max(0, last - end.get(key, 0))
    return lag


def offsets_read(progress: Mapping[str, Any] | None) -> dict[str, int]:
    """Offsets the batch of a progress report read past, per topic (its rows and markers)."""
    read: dict[str, int] = {}
    for source in (progress or {}).get("sources", []):
        start, end = (_offsets(source.get(k)) for k in ("startOffset", "endOffset"))
        for (topic, partition), last in end.items():
            # No start: the query's first batch, read from the partition's beginning.
            first = start.get((topic, partition), 0)
            read[topic] = read.get(topic, 0) + max(0, last - first)
    return read


def end_offsets(progress: Mapping[str, Any] | None) -> dict[Partition, int]:
    """The offset after the last one the batch read, per topic partition (Kafka's "committed")."""
    ends: dict[Partition, int] = {}
    for source in (progress or {}).get("sources", []):
        ends.update(_offsets(source.get("endOffset")))
    return ends


def _offsets(raw: Any) -> dict[Partition, int]:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        log.warning("unreadable offsets in query progress raw=%r", raw)
        return {}
    if not isinstance(data, dict):
        return {}
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
