"""The last hour of lag and throughput per topic: ``writer_history.json`` beside the status file.

The status page plots lag and throughput over the last hour; Prometheus keeps such history for
those who run it, but the page must work without it (and without the writer running). So the
writer keeps its own: :class:`History` watches every query progress (a
:class:`~lakehouse_writer.runtime.status.StatusObserver`) and folds it into buckets of
:data:`STEP_S` seconds, each holding per topic the last lag seen (offsets behind the latest)
and the offsets read past in it (rows, plus one transaction marker per partition and
transaction). At most an hour of buckets is kept, in memory and in the checkpoint's
``writer_history.json`` (written when a bucket closes, so at most every :data:`STEP_S`
seconds, atomically, on the checkpoint's file system), where ``lakehouse-writer ui`` reads it
and where a restarted writer picks it up.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lakehouse_writer.runtime.status import BatchStats, lag_of, offsets_read
from lakehouse_writer.runtime.storage import CheckpointFiles

__all__ = ["HISTORY_FILE", "STEP_S", "WINDOW_S", "Bucket", "History", "read_history"]

log = logging.getLogger(__name__)

HISTORY_FILE = "writer_history.json"
STEP_S = 10  # seconds a bucket spans: Spark reports an idle query's progress every 10 s
WINDOW_S = 3600  # the history kept: the page's "last hour"


@dataclass
class Bucket:
    """What the progress reports of one :data:`STEP_S` span said, per topic.

    Attributes:
        start: The span's start (Unix seconds, a multiple of :data:`STEP_S`).
        lag: Offsets behind the latest at the last report of the span.
        read: Offsets read past during the span.
    """

    start: float
    lag: dict[str, int] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The bucket as JSON; throughput is ``read`` over :data:`STEP_S`."""
        return {"t": self.start, "lag": self.lag, "read": self.read}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Bucket:
        """A bucket written by :meth:`to_json`."""
        return cls(
            float(data["t"]),
            {str(k): int(v) for k, v in (data.get("lag") or {}).items()},
            {str(k): int(v) for k, v in (data.get("read") or {}).items()},
        )


class History:
    """The last :data:`WINDOW_S` seconds of lag and offsets read per topic (see the module).

    Args:
        checkpoint: The checkpoint directory (a local path or a Hadoop URI) of the file.
        clock: Unix time now (tests pass their own).
    """

    def __init__(self, checkpoint: str, clock: Callable[[], float] = time.time) -> None:
        self._files = CheckpointFiles(checkpoint)
        self._clock = clock
        self._buckets: list[Bucket] = _load(self._files)

    @property
    def buckets(self) -> list[Bucket]:
        """The buckets of the window, oldest first."""
        return list(self._buckets)

    def on_status(self, stats: BatchStats) -> None:
        """Nothing: the history is made of progress reports."""

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Fold a progress report into its bucket; write the file when a bucket closed."""
        when = _report_time(progress) or self._clock()
        start = when - when % STEP_S
        closed = bool(self._buckets) and self._buckets[-1].start < start
        if not self._buckets or closed:
            self._buckets.append(Bucket(start))
        bucket = self._buckets[-1]
        if start < bucket.start:  # a report older than the last bucket: count it there
            log.debug("late progress report at=%s", progress.get("timestamp"))
        for topic, read in offsets_read(progress).items():
            bucket.read[topic] = bucket.read.get(topic, 0) + read
        bucket.lag.update(lag_of(progress))
        self._buckets = [b for b in self._buckets if b.start > self._clock() - WINDOW_S]
        if closed:
            self.save()

    def save(self) -> None:
        """Write the file now (the writer's last act of a run, so the last bucket is kept)."""
        text = json.dumps({"step_s": STEP_S, "buckets": [b.to_json() for b in self._buckets]})
        try:
            self._files.replace(HISTORY_FILE, text)
        except Exception as exc:  # noqa: BLE001 - a page's history never stops the writer
            log.warning("history not written error=%s: %s", type(exc).__name__, exc)


def _report_time(progress: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return None


def _load(files: CheckpointFiles) -> list[Bucket]:
    """The buckets of the file (none when it is absent or unreadable)."""
    try:
        text = files.read(HISTORY_FILE)
        if not text:
            return []
        return [Bucket.from_json(b) for b in json.loads(text).get("buckets", [])]
    except Exception as exc:  # noqa: BLE001 - a lost history only empties the plots
        log.warning("history not read error=%s: %s", type(exc).__name__, exc)
        return []


def read_history(checkpoint: str, now: float | None = None) -> list[Bucket]:
    """The buckets of the last hour in the checkpoint's history file, oldest first."""
    since = (now if now is not None else time.time()) - WINDOW_S
    return [b for b in _load(CheckpointFiles(checkpoint)) if b.start > since]
