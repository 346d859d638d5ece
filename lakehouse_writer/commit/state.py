"""The writer's own progress, kept in the lakehouse: the Delta table ``_writer_state``.

What a restart must not forget is appended once per micro-batch, as the batch's last write
(idempotently, like every other write), one row per fact:

- ``offset``: the highest offset processed of a topic partition;
- ``table``: an applied table's Delta version after the batch;
- ``pending``: a ``_commits`` record whose rows are not all applied yet (its JSON);
- ``done``: a pending commit whose ``_commits`` row has now been written;
- ``stopped``: a table stopped by an incompatible schema change, with the error. A stopped
  table stays stopped across restarts; to resume it, fix the table and run
  ``lakehouse-writer resume-table <namespace>.<name>`` while the writer is down
  (:mod:`lakehouse_writer.commit.stopped`);
- ``truncate``: a TRUNCATE applied to a table (``record``: its time and scope as JSON), read
  by :class:`~lakehouse_writer.commit.truncate_log.TruncateLog` of every writer instance. Compaction
  keeps these rows (one per TRUNCATE applied; the log, when loaded, leaves out those a later
  whole-table TRUNCATE of their table makes moot);
- ``held``: a partition's offsets held back for the next batch (``offset``: the first,
  ``record``: ``{"until": n}``; :mod:`lakehouse_writer.read.holdback`). Each batch that writes
  state replaces the held ranges of the batch before;
- ``awaits``: where the next batch reads ``_commits`` from (``partition``, ``offset``), with
  the same lifetime as ``held``;
- ``batch``: written alone by a batch that changed nothing else (its rows were all of
  aborted transactions, say), so that every batch leaves a row: a checkpoint whose batches
  the lakehouse holds no row of belongs to another lakehouse
  (:func:`~lakehouse_writer.commit.checkpoint_guard.check_lakehouse`).

Rows carry the writer instance id (one per checkpoint) and the batch id. As the state is
written last, a batch id it already holds is a batch whose every write happened: a replay of
it (the checkpoint had not recorded it before a crash) has nothing left to do. Every
:data:`COMPACT_EVERY` batches the instance's rows are rewritten as the live facts only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.system_tables import DeltaRsAppend, read_rows
from lakehouse_writer.engines import ids
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.read.commits import CommitRecord
from lakehouse_writer.read.ranges import OffsetRanges, held_record, held_until
from lakehouse_writer.runtime.frames import arrow_rows, ddl_struct, local_frame

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STATE = "_writer_state"
STATE_SCHEMA = (
    "instance STRING, batch_id BIGINT, kind STRING, topic STRING, `partition` INT, "
    "`offset` BIGINT, `table` STRING, version BIGINT, commit_id STRING, record STRING, "
    "error STRING"
)
COMPACT_EVERY = 200  # batches; bounds the rows and files a restart reads
TRUNCATE = "truncate"  # the kind of a TRUNCATE's row
BATCH = "batch"  # the row of a batch that changed nothing else: the instance applied it
_KIND_ORDER = {
    "offset": 0,
    "table": 1,
    "pending": 2,
    "done": 3,
    "stopped": 4,
    "held": 5,
    "awaits": 6,
}


@dataclass
class BatchChanges:
    """What one batch adds to the writer's state.

    Attributes:
        offsets: Highest offset of the batch per (topic, partition).
        versions: Delta version per applied table.
        pending: Commit records still waiting for rows.
        done: Ids of earlier pending commits written to ``_commits`` now.
        stopped: Tables stopped in this batch, with their error.
        truncates: TRUNCATEs applied in this batch: (table, ``record`` JSON) pairs
            (:meth:`~lakehouse_writer.commit.truncate_log.TruncateLog.record`).
        held: Offsets held back for the next batch, ``[from, until)`` per partition.
        awaits: Where the next batch reads commit records from, per ``_commits`` partition.
    """

    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    pending: list[CommitRecord] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)
    truncates: list[tuple[str, str]] = field(default_factory=list)
    held: OffsetRanges = field(default_factory=dict)
    awaits: dict[int, int] = field(default_factory=dict)

    def rows(self, instance: str, batch_id: int) -> list[tuple[Any, ...]]:
        """The ``_writer_state`` rows of these changes."""

        def row(kind: str, **values: Any) -> tuple[Any, ...]:
            names = (
                "topic",
                "partition",
                "offset",
                "table",
                "version",
                "commit_id",
                "record",
                "error",
            )
            return (instance, batch_id, kind, *(values.get(n) for n in names))

        rows = [
            *(row("offset", topic=t, partition=p, offset=o) for (t, p), o in self.offsets.items()),
            *(row("table", table=t, version=v) for t, v in self.versions.items()),
            *(
                row(
                    "pending",
                    topic=c.topic,
                    partition=c.partition,
                    offset=c.offset,
                    commit_id=c.commit_id,
                    record=c.raw,
                )
                for c in self.pending
            ),
            *(row("done", commit_id=c) for c in self.done),
            *(row("stopped", table=t, error=e) for t, e in self.stopped.items()),
            *(row(TRUNCATE, table=t, record=r) for t, r in self.truncates),
            *(
                row("held", topic=t, partition=p, offset=first, record=held_record(until))
                for (t, p), (first, until) in self.held.items()
            ),
            *(row("awaits", partition=p, offset=o) for p, o in self.awaits.items()),
        ]
        return rows or [row(BATCH)]  # every batch leaves a row (checkpoint_guard)


@dataclass
class WriterState:
    """What the writer knows after its last completed batch.

    Attributes:
        last_batch: The last batch whose writes all happened (-1: none yet).
        offsets: Highest offset processed per (topic, partition).
        versions: Delta version of each applied table after its last batch.
        pending: Commit records waiting for rows, by commit id.
        stopped: Stopped tables and why.
        held: Offsets the last batch held back (:mod:`lakehouse_writer.read.holdback`).
        awaits: Where the next batch reads ``_commits`` from, per partition.
    """

    last_batch: int = -1
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    pending: dict[str, CommitRecord] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)
    held: OffsetRanges = field(default_factory=dict)
    awaits: dict[int, int] = field(default_factory=dict)

    def merged_offsets(self, new: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The offsets after a batch that processed up to ``new``."""
        out = dict(self.offsets)
        for key, offset in new.items():
            out[key] = max(offset, out.get(key, -1))
        return out

    def apply(self, changes: BatchChanges, batch_id: int) -> None:
        """Take in what batch ``batch_id`` did."""
        self.offsets = self.merged_offsets(changes.offsets)
        self.versions.update(changes.versions)
        self.pending.update({c.commit_id: c for c in changes.pending})
        for commit_id in changes.done:
            self.pending.pop(commit_id, None)
        self.stopped.update(changes.stopped)
        self.held = dict(changes.held)
        self.awaits = dict(changes.awaits)
        self.last_batch = max(self.last_batch, batch_id)

    def live(self) -> BatchChanges:
        """The state as one set of changes (what compaction keeps)."""
        return BatchChanges(
            dict(self.offsets),
            dict(self.versions),
            list(self.pending.values()),
            [],
            dict(self.stopped),
            held=dict(self.held),
            awaits=dict(self.awaits),
        )


class StateStore:
    """Reads and appends ``_writer_state`` for one writer instance.

    Args:
        spark: The session.
        path: Location of the ``_writer_state`` table.
        instance: The writer instance id (from the checkpoint).
    """

    def __init__(self, spark: SparkSession, path: str, instance: str) -> None:
        self._spark = spark
        self._path = path
        self._instance = instance
        self._exists = False  # known to exist: create() looks no more
        self._delta_rs = DeltaRsAppend(path)  # each batch's rows, where delta-rs may

    def load(self) -> WriterState:
        """The state after the instance's last completed batch (empty on first start)."""
        state = WriterState()
        rows = read_rows(self._spark, self._path, "instance", self._instance)
        for row in sorted(rows, key=lambda r: (r.batch_id, _KIND_ORDER.get(r.kind, 9))):
            _fold(state, row)
        log.info(
            "writer state loaded instance=%s last_batch=%d pending_commits=%d stopped=%s",
            self._instance,
            state.last_batch,
            len(state.pending),
            sorted(state.stopped),
        )
        return state

    def create(self) -> bool:
        """Create the table, empty, when there is none; True when it did.

        The first batch's :meth:`append` would create it as well, on the batch's path (a
        commit of its own, about 0.4 s); the writer calls this off that path, while the query
        starts and while a batch's scan job runs.
        """
        from delta.tables import DeltaTable

        if self._exists or DeltaTable.isDeltaTable(self._spark, self._path):
            self._exists = True
            return False
        schema = ddl_struct(STATE_SCHEMA).add("written_at", "timestamp")  # as _frame
        DeltaTable.createIfNotExists(self._spark).location(self._path).addColumns(schema).execute()
        self._exists = True
        return True

    def append(self, changes: BatchChanges, batch_id: int) -> None:
        """Append what batch ``batch_id`` did (once: a replay of the batch writes nothing)."""
        rows = changes.rows(self._instance, batch_id)
        app_id = ids.app_id_for(self._instance, STATE)
        version = ids.txn_version(batch_id, ids.STEP_SYSTEM)
        if not self._delta_rs.append(self._arrow(rows), app_id, version):
            txn.append(self._frame(rows), self._path, app_id, version)

    def compact(self, state: WriterState) -> None:
        """Rewrite this instance's rows as the live state only (atomic; others untouched).

        Its ``truncate`` rows stay as they are.
        """
        rows = state.live().rows(self._instance, state.last_batch)
        condition = f"instance = '{self._instance}' AND kind <> '{TRUNCATE}'"
        self._frame(rows).write.format("delta").mode("overwrite").option(
            "replaceWhere", condition
        ).save(self._path)
        log.info("writer state compacted instance=%s rows=%d", self._instance, len(rows))

    def _arrow(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        """``rows`` as :meth:`_frame` gives them, in Arrow (written now)."""
        import pyarrow as pa

        data = arrow_rows(rows, STATE_SCHEMA)
        now = pa.array([datetime.now(UTC)] * len(rows), pa.timestamp("us", "UTC"))
        return data.append_column("written_at", now)

    def _frame(self, rows: list[tuple[Any, ...]]) -> Any:
        from pyspark.sql import functions as F

        frame = local_frame(self._spark, rows, STATE_SCHEMA)
        return frame.withColumn("written_at", F.current_timestamp())


def _fold(state: WriterState, row: Any) -> None:
    if row.batch_id > state.last_batch:
        state.held, state.awaits = {}, {}  # a later batch's state replaces them
    if row.kind == "offset":
        state.offsets[(row.topic, row.partition)] = max(
            row.offset, state.offsets.get((row.topic, row.partition), -1)
        )
    elif row.kind == "table":
        state.versions[row.table] = row.version
    elif row.kind == "pending":
        record = CommitRecord.parse(row.record, row.topic, row.partition, row.offset)
        state.pending[record.commit_id] = record
    elif row.kind == "done":
        state.pending.pop(row.commit_id, None)
    elif row.kind == "stopped":
        state.stopped[row.table] = row.error
    elif row.kind == "held":
        state.held[(row.topic, row.partition)] = (row.offset, held_until(row.record))
    elif row.kind == "awaits":
        state.awaits[row.partition] = row.offset
    state.last_batch = max(state.last_batch, row.batch_id)
