"""A micro-batch read once: the rows held back before in front, whole transactions only.

:meth:`BatchReader.scan` is the first step of a batch. It asks the holdback
(:class:`~lakehouse_writer.read.holdback.Holdback`) which transactions the batch holds whole,
lets the speed-ups around the read do their part — a reload written in the pass that reads
it (a :class:`Bet`), tables made while the scan job runs (:class:`Ahead`) — and reads the
rest by the path the router chose (:class:`ReadPath`): a small batch into the driver whole
(a consumer over its offset ranges, :class:`~lakehouse_writer.read.driver_read.DriverRead`,
or one Spark job), any other by Spark's scan, which decodes the expected schemas in the pass
that reads them (:func:`~lakehouse_writer.read.scan.scan`). The speed-ups and the router are
given to it: the read side imports none of the apply side.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lakehouse_writer.read.driver_read import DriverRead
from lakehouse_writer.read.holdback import Holdback, Plan, Progress
from lakehouse_writer.read.ranges import OffsetRanges
from lakehouse_writer.read.scan import BatchScan, Expected, collect, scan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["Ahead", "BatchReader", "Before", "Bet", "ReadPath", "ScannedBatch", "Speculation"]

log = logging.getLogger(__name__)


class Speculation(Protocol):
    """A topic's rows written in the pass that read them, not committed yet.

    Attributes:
        info: The table they are written to.
        rest: The batch's other rows (None: none).
        offsets: The highest offset read per partition of the topic.
    """

    info: TableInfo
    rest: DataFrame | None
    offsets: dict[tuple[str, int], int]

    def discard(self) -> None:
        """Delete the files written, uncommitted."""
        ...


class Bet(Protocol):
    """Writes one topic's rows in the pass that reads them (a reload into an empty table)."""

    def place(
        self,
        source: DataFrame,
        expected: list[Expected],
        batch_id: int,
        ranges: OffsetRanges | None,
        stopped: dict[str, str],
    ) -> Speculation | None:
        """Bet on a topic of the batch, or not (None)."""
        ...


class Ahead(Protocol):
    """Driver work done while the scan job runs (tables made ahead of their rows)."""

    def batch_starts(self) -> list[Expected]:
        """A batch starts: the schemas it is expected to hold."""
        ...

    def while_scanning(self, expected: list[Expected]) -> AbstractContextManager[None]:
        """A block during which the scan runs."""
        ...


class Before(Progress, Protocol):
    """What the writer applied before the batch, and the tables it stopped."""

    stopped: dict[str, str]


class ReadPath(Protocol):
    """The router's decisions on how a batch is read."""

    def reads_whole(self, ranges: OffsetRanges | None, held: OffsetRanges) -> bool:
        """Whether the batch is read into the driver whole."""
        ...

    def scanned(self, expected: list[Expected], ranges: OffsetRanges | None) -> list[Expected]:
        """The expected schemas the scan decodes in the pass that reads the batch."""
        ...


@dataclass
class ScannedBatch:
    """A micro-batch as read.

    Attributes:
        rows: The rows the scan read (the held-back rows in front; without the topic the
            reload bet took).
        found: What the scan found: the batch's rows, offsets, headers, decoded rows.
        reload: The reload written in the pass that read it, until committed or discarded.
        offsets: The highest offset read per partition (the reload's and a cut's too).
        held: Offsets held back for the next batch.
        awaits: Where the next batch reads ``_commits`` from.
    """

    rows: DataFrame
    found: BatchScan
    reload: Speculation | None
    offsets: dict[tuple[str, int], int]
    held: OffsetRanges
    awaits: dict[int, int]

    @property
    def topics(self) -> set[str]:
        """The topics the batch holds rows of."""
        return {topic for topic, _ in self.found.offsets}

    def release(self) -> None:
        """Drop the cache; discard a reload not committed (the batch failed)."""
        if self.reload is not None:
            self.reload.discard()
            self.reload = None
        self.found.release()


class BatchReader:
    """Reads each micro-batch once (see the module docstring).

    Args:
        spark: The session.
        holdback: Finds the transactions a batch holds whole.
        driver_read: Reads a small batch's offset ranges with a consumer in the driver.
        path: The router's read decisions.
        ahead: Driver work while the scan runs.
        bet: The reload written in the pass that reads it.
        system_topics: Topics whose rows are not change rows.
    """

    def __init__(
        self,
        spark: SparkSession,
        holdback: Holdback,
        driver_read: DriverRead,
        path: ReadPath,
        ahead: Ahead,
        bet: Bet,
        system_topics: set[str],
    ) -> None:
        self._spark = spark
        self._holdback = holdback
        self._driver_read = driver_read
        self._path = path
        self._ahead = ahead
        self._bet = bet
        self._system = system_topics

    def scan(self, source: DataFrame, batch_id: int, state: Before) -> ScannedBatch:
        """Read the batch once: the rows held back before in front, maybe a reload bet."""
        expected = self._ahead.batch_starts()
        reload: Speculation | None = None
        with self._ahead.while_scanning(expected):
            try:
                plan = self._holdback.plan(source, state, batch_id)
                if not plan.changed:  # the bet reads the batch's own offset ranges again
                    reload = self._bet.place(
                        plan.source, expected, batch_id, plan.ranges, state.stopped
                    )
                rows = plan.source if reload is None else reload.rest
                if rows is None:  # the reload is all the batch holds: nothing to scan
                    rows = self._spark.createDataFrame([], plan.source.schema)
                    found = BatchScan(rows)
                else:
                    found = self._read(rows, plan, expected, batch_id, state, reload is None)
            except BaseException:
                if reload is not None:
                    reload.discard()
                raise
        offsets = found.offsets  # the highest offset read per partition
        if reload is not None:
            offsets.update(reload.offsets)
        for key, offset in plan.processed.items():  # up to a cut: held back after it
            offsets[key] = max(offset, offsets.get(key, -1))
        return ScannedBatch(rows, found, reload, offsets, plan.held, plan.awaits)

    def close(self) -> None:
        """Close the driver's consumers."""
        self._holdback.close()
        self._driver_read.close()

    def _read(
        self,
        rows: DataFrame,
        plan: Plan,
        expected: list[Expected],
        batch_id: int,
        state: Before,
        own_ranges: bool,
    ) -> BatchScan:
        """The rows of the batch by the path the router chose.

        ``own_ranges``: the rows are the batch's own offset ranges (no reload took a topic
        out), so a consumer may read them instead of Spark.
        """
        if not self._path.reads_whole(plan.ranges, state.held):
            return scan(rows, self._path.scanned(expected, plan.ranges), self._system)
        reads = plan.reads if own_ranges else None
        raw = self._driver_read.read(reads) if reads is not None else None
        found = collect(rows, self._system, raw)
        log.info(
            "batch read into the driver batch=%d rows=%d by=%s",
            batch_id,
            len(found),
            "spark" if raw is None else "consumer",
        )
        return found
