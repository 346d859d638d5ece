"""A batch's system tables: ``_rejected``, ``_execution_log``, ``_lineage`` and ``_commits``.

:meth:`SystemStep.commit_records` reads the batch's commit records (one per producer
transaction) before its rows are applied; :meth:`SystemStep.write` writes, once the tables are
applied, the rows the batch rejected (with their raw bytes, :mod:`lakehouse_writer.commit.
system_tables`), the records of the system topics, and the ``_commits`` row of every commit
whose rows are now all applied, with the Delta version of each table it touched. Every write
is idempotent per batch id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse_writer.commit.state import BatchChanges, WriterState
from lakehouse_writer.commit.system_tables import (
    DeltaRsAppend,
    append_system,
    log_rows,
    system_txn,
)
from lakehouse_writer.engines.spark.conflicts import retry_on_conflict
from lakehouse_writer.read.commits import (
    COMMIT_ROW_SCHEMA,
    BadCommitRecord,
    CommitRecord,
    commit_frame,
    commit_rows,
)
from lakehouse_writer.read.decode import with_raw_bytes
from lakehouse_writer.read.rejected import REJECTED, rejected_rows
from lakehouse_writer.runtime.frames import arrow_rows, local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.read.reader import ScannedBatch
    from lakehouse_writer.read.scan import BatchScan
    from lakehouse_writer.read.topics import TopicPattern
    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["COMMITS", "SystemStep"]

log = logging.getLogger(__name__)

COMMITS = "_commits"
_BAD_RECORD_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, error STRING"
)


class SystemStep:
    """Reads the batch's commit records; writes its system tables (see the module docstring).

    Args:
        spark: The session.
        settings: The system topics and the lakehouse.
        instance_id: The writer instance (the transaction ids' part).
        ours: Which topics the writer reads (a commit of other topics is not its to write).
    """

    def __init__(
        self, spark: SparkSession, settings: LakehouseSettings, instance_id: str, ours: TopicPattern
    ) -> None:
        self._spark = spark
        self._settings = settings
        self._instance = instance_id
        self._ours = ours
        self._lake = settings.lakehouse_path.rstrip("/")
        self._commits = DeltaRsAppend(f"{self._lake}/{COMMITS}")  # where delta-rs may
        self.written: set[str] = set()  # the system tables written by this process

    def commit_records(self, batch: ScannedBatch) -> tuple[list[CommitRecord], list[DataFrame]]:
        """The batch's commit records (few: one per producer transaction), and bad ones."""
        from pyspark.sql import functions as F

        topic = self._settings.commits_topic
        if topic not in batch.topics:
            return [], []
        records, bad = [], []
        for partition, offset, key, value in batch.found.messages(topic):
            try:
                text = bytes(value or b"").decode("utf-8")
                records.append(CommitRecord.parse(text, topic, partition, offset))
            except (BadCommitRecord, UnicodeDecodeError) as exc:
                bad.append((topic, partition, offset, key, value, str(exc)))
        if not bad:
            return records, []
        frame = local_frame(self._spark, bad, _BAD_RECORD_SCHEMA)
        return records, [rejected_rows(frame, F.col("error"), COMMITS)]

    def write(
        self,
        batch: ScannedBatch,
        rejected: Sequence[DataFrame],
        commits: list[CommitRecord],
        changes: BatchChanges,
        state: WriterState,
        batch_id: int,
    ) -> int:
        """Write ``_rejected``, the system topics' tables and ``_commits``; the rows rejected."""
        count = self._write_rejected(rejected, batch_id, batch.rows)
        self._write_logs(batch.found, batch_id, batch.topics)
        self._write_commits(batch_id, commits, changes, state)
        return count

    def _write_rejected(self, rejected: Sequence[DataFrame], batch_id: int, rows: DataFrame) -> int:
        union = reduce(lambda a, b: a.unionByName(b), rejected) if rejected else None
        if union is None:
            return 0
        union = with_raw_bytes(union, rows).persist()
        try:
            count = union.count()
            if count:
                append_system(union, f"{self._lake}/{REJECTED}", self._instance, batch_id)
                self.written.add(REJECTED)
                log.warning("rows rejected batch=%d rows=%d table=%s", batch_id, count, REJECTED)
        finally:
            union.unpersist()
        return count

    def _write_logs(self, found: BatchScan, batch_id: int, topics: set[str]) -> None:
        s = self._settings
        for topic, table in (
            (s.execution_log_topic, "_execution_log"),
            (s.lineage_topic, "_lineage"),
        ):
            if topic in topics:
                self._append_system(log_rows(found.of_topics([topic]), table), table, batch_id)

    def _write_commits(
        self,
        batch_id: int,
        commits: list[CommitRecord],
        changes: BatchChanges,
        state: WriterState,
    ) -> None:
        """Write the ``_commits`` rows of every commit now complete; keep the others pending."""
        ours = self._ours
        fresh = {c.commit_id: c for c in commits if c.concerns(ours)}
        if len(fresh) < len(commits):
            log.info(
                "commits of topics not read here ignored batch=%d commits=%d",
                batch_id,
                len(commits) - len(fresh),
            )
        offsets = state.merged_offsets(changes.offsets)
        waiting = {**state.pending, **fresh}
        complete = [c for c in waiting.values() if c.is_complete(offsets, ours)]
        done = {c.commit_id for c in complete}
        changes.pending = [c for c in fresh.values() if c.commit_id not in done]
        changes.done = [c for c in state.pending if c in done]
        if complete:
            versions = {**state.versions, **changes.versions}
            ordered = sorted(complete, key=lambda c: (c.topic, c.partition, c.offset))
            stopped = {**state.stopped, **changes.stopped}
            if not self._append_commits(ordered, versions, stopped, batch_id):
                frame = commit_frame(self._spark, ordered, versions, ours, stopped)
                self._append_system(frame, COMMITS, batch_id)
            self.written.add(COMMITS)
        if waiting:
            log.info(
                "commits batch=%d written=%d pending=%d",
                batch_id,
                len(complete),
                len(waiting) - len(complete),
            )

    def _append_commits(
        self,
        ordered: list[CommitRecord],
        versions: dict[str, int],
        stopped: dict[str, str],
        batch_id: int,
    ) -> bool:
        """Append the ``_commits`` rows by delta-rs (no Spark job); False: Spark is to."""
        rows = commit_rows(ordered, versions, self._ours, stopped)
        if rows is None:
            return False
        now = time.time_ns() // 1000
        data = arrow_rows([(*row, batch_id, now) for row in rows], COMMIT_ROW_SCHEMA)
        app_id, version = system_txn(self._instance, f"{self._lake}/{COMMITS}", batch_id)
        return self._commits.append(data, app_id, version)

    def _append_system(self, frame: DataFrame, table: str, batch_id: int) -> None:
        path = f"{self._lake}/{table}"
        retry_on_conflict(
            lambda: append_system(frame, path, self._instance, batch_id),
            f"table={table} batch={batch_id}",
        )
        self.written.add(table)
