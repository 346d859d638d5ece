"""The streaming query: Kafka (read_committed) → foreachBatch → Delta tables.

:class:`BatchProcessor` is what ``foreachBatch`` calls. Per micro-batch it reads, decodes and
caches the batch in one pass and finds the highest offset of every topic partition
(:mod:`lakehouse_writer.read.scan`), decodes the rows of schemas it did not expect
(:mod:`lakehouse_writer.read.decode`) and applies them per table
(:mod:`lakehouse_writer.engines.spark.apply`; the tables of a batch are created, and applied,
several at a time: :mod:`lakehouse_writer.route.parallel`), appends ``_rejected``,
``_execution_log`` and ``_lineage``, writes the ``_commits`` rows of the commits now complete
(:mod:`lakehouse_writer.commit.commits`), and last the batch's state
(:mod:`lakehouse_writer.commit.state`; it holds the TRUNCATEs applied, too). Every write is
idempotent per batch id, so a replay after a crash is harmless; a batch the state already holds is
skipped outright. While the scan job runs, a second thread creates what the batch will write to and
is missing; a running writer builds, between batches, the Delta state of the tables it just merged
into (:class:`~lakehouse_writer.route.ahead.Ahead`). Failed runs:
:mod:`~lakehouse_writer.ops.failure`; the checks before the query starts:
:mod:`~lakehouse_writer.read.topics`, :mod:`~lakehouse_writer.ops.probe`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit import ids
from lakehouse_writer.commit.checkpoint_guard import (
    check_checkpoint,
    check_lakehouse,
    concurrent_start,
)
from lakehouse_writer.commit.commits import (
    COMMIT_ROW_SCHEMA,
    BadCommitRecord,
    CommitRecord,
    commit_frame,
    commit_rows,
)
from lakehouse_writer.commit.state import (
    COMPACT_EVERY,
    STATE,
    BatchChanges,
    StateStore,
    WriterState,
)
from lakehouse_writer.commit.system_tables import (
    REJECTED,
    DeltaRsAppend,
    append_system,
    arrow_rows,
    local_frame,
    log_rows,
    rejected_rows,
    system_txn,
)
from lakehouse_writer.commit.truncate_log import TruncateLog
from lakehouse_writer.engines.delta_rs.small_tables import SmallTables
from lakehouse_writer.engines.delta_rs.writes import SmallChanges
from lakehouse_writer.engines.spark.apply import ApplyResult, apply_batch
from lakehouse_writer.engines.spark.conflicts import retry_on_conflict
from lakehouse_writer.engines.spark.reload import ReloadBet, Speculation
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.ops.failure import Failure, report_failure, root_cause, secrets_of
from lakehouse_writer.ops.probe import probe_kafka
from lakehouse_writer.ops.status import BatchStats, lag_of, record_lag, write_status
from lakehouse_writer.read.catalog import RegistryLookups, SchemaCatalog
from lakehouse_writer.read.decode import (
    DecodedBatch,
    decode_batch,
    source_options,
    with_raw_bytes,
)
from lakehouse_writer.read.driver_read import DriverRead
from lakehouse_writer.read.holdback import Holdback
from lakehouse_writer.read.scan import BatchScan, ExpectedSchemas, collect, scan
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.route.ahead import Ahead
from lakehouse_writer.route.parallel import Outcome, TableApplier, on_session
from lakehouse_writer.runtime.session import require_classic
from lakehouse_writer.runtime.storage import CheckpointFiles
from lakehouse_writer.tables.manager import (
    TableInfo,
    TableManager,
    TableRef,
)
from lakehouse_writer.tables.scheduled import ScheduledMaintenance
from producer_lib.timing import Steps

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["BatchProcessor", "lag_of", "run", "start"]

log = logging.getLogger(__name__)

COMMITS = "_commits"
LEGACY_TRUNCATES = "_truncates"  # where earlier versions kept the TRUNCATE log
_STOP_WAIT_S = 60.0  # bound on waiting for Spark to record the last batch on a stop
ONCE_QUERIES = 3  # queries a run --once starts while rows stay held back (_held_at_end)
_BAD_RECORD_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, error STRING"
)


@dataclass
class ScannedBatch:
    """A micro-batch as read (:meth:`BatchProcessor._scan`).

    Attributes:
        rows: The rows the scan read (the held-back rows in front; without the topic the
            reload bet took).
        found: What the scan found: the batch's rows, offsets, headers, decoded rows.
        changes: What the batch changes in the writer's state, filled in as it applies.
        reload: The reload written in the pass that read it, until committed or discarded.
    """

    rows: DataFrame
    found: BatchScan
    changes: BatchChanges
    reload: Speculation | None

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


class WriterStopping(LakehouseWriterError):
    """A batch arrived after a stop was requested; it is left for the next start."""


class BatchProcessor:
    """The ``foreachBatch`` function of the writer.

    Args:
        spark: The session.
        settings: Where to read and write.
        instance_id: The writer instance id of the checkpoint (Delta txnAppId).
        warm: Build the state of merged tables between batches
            (:meth:`~lakehouse_writer.route.ahead.Ahead.warm`); for a
            writer that waits for its next trigger, not one that drains and exits.
        ours: The topics regex as the JVM compiled it; None compiles ``topics_regex``.

    Attributes:
        failure: Why a batch failed (the query knows only a Python proxy's text of it).
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: LakehouseSettings,
        instance_id: str,
        warm: bool = False,
        ours: TopicPattern | None = None,
    ) -> None:
        self._spark = spark
        self._settings = settings
        self._instance = instance_id
        self._lake = settings.lakehouse_path.rstrip("/")
        self._tables = TableManager(spark, self._lake, settings.deletion_vectors)
        self._catalog = SchemaCatalog(
            settings.kafka_client_conf(), settings.schemas_topic, settings.registry
        )
        self._store = StateStore(spark, f"{self._lake}/{STATE}", instance_id)
        self._state: WriterState | None = None
        self._ours = ours or TopicPattern(spark, settings.topics_regex)
        self._secrets = secrets_of(settings)
        self.failure: Failure | None = None
        self._persisted: list[DataFrame] = []
        self._merged: list[str] = []  # paths of the tables merged into by the running batch
        self._expected = ExpectedSchemas()
        self._workers = (
            settings.apply_workers
        )  # tables applied at once (lakehouse_writer.route.parallel)
        self._small = SmallChanges(settings.small_merge_rows)  # few rows: merged by delta-rs
        self._maintenance = ScheduledMaintenance(  # opt-in: LAKEHOUSE_MAINTAIN_INTERVAL_S
            spark,
            self._lake,
            settings.maintain_interval_s,
            settings.maintain_budget_s,
            settings=settings.maintain,
        )
        self._holdback = Holdback(
            settings.kafka_client_conf(),
            source_options(settings),
            settings.commits_topic,
            self._ours,
        )
        self._driver_read = DriverRead(settings.kafka_client_conf())  # a small batch, no job
        self._commits = DeltaRsAppend(f"{self._lake}/{COMMITS}")  # where delta-rs may
        self._truncates = TruncateLog(
            spark, f"{self._lake}/{STATE}", f"{self._lake}/{LEGACY_TRUNCATES}"
        )
        self._small_tables = SmallTables(  # few rows: applied in the driver, no Spark job
            spark,
            self._small,
            self._tables,
            self._catalog,
            self._truncates,
            instance_id,
            self._lake,
            settings.driver_read_rows,
        )
        self._gate = threading.Lock()
        self._closed = False
        self.refused = False
        self.last = BatchStats()
        self._ahead = Ahead(
            spark,
            self._catalog,
            self._tables,
            self._expected,
            self._ours,
            self._store.create,
            self._secrets,
            warm,
            # Not the driver's consumer: one made ahead of its first assign fetched later
            # than one made then (docs/PERFORMANCE.md).
            warm_ups=(self._small_tables.warm_up,),
        )
        self._reload = ReloadBet(
            spark,
            self._tables,
            settings.reload_one_pass_min_rows,
            source_options(settings),
            instance_id,
            self._truncates,
            self._ahead.creatable,
        )

    @property
    def registry(self) -> RegistryLookups | None:
        """The schema registry's lookups (None: no ``SCHEMA_REGISTRY_URL``)."""
        return self._catalog.registry

    @property
    def state(self) -> WriterState:
        """The writer's state after its last completed batch (loaded on first use)."""
        if self._state is None:
            self._state = self._store.load()
        return self._state

    @property
    def _system_topics(self) -> set[str]:
        s = self._settings
        return {s.commits_topic, s.execution_log_topic, s.lineage_topic, s.schemas_topic}

    def close(self) -> None:
        """Refuse batches from now on; returns once the running batch, if any, is done."""
        with self._gate:
            self._closed = True
        self._ahead.close()
        self._holdback.close()
        self._driver_read.close()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Apply one micro-batch (skipped when the state shows it applied already).

        Raises:
            WriterStopping: :meth:`close` was called; nothing of the batch was written.
        """
        with self._gate:
            if self._closed:
                self.refused = True
                raise WriterStopping(
                    "the writer is stopping; the batch is left for the next start", batch=batch_id
                )
            try:
                if batch_id > self.state.last_batch:
                    self._process(df, batch_id)
                else:
                    log.info("batch skipped batch=%d reason=already applied", batch_id)
            except Exception as exc:
                self.failure = Failure.of(exc, self._secrets)
                raise

    def _process(self, source: DataFrame, batch_id: int) -> None:
        started, steps = time.monotonic(), Steps()
        with steps("scan"):
            batch = self._scan(source, batch_id)
        try:
            with steps("commits"):
                commits, bad = self._read_commits(batch.found, batch.topics)
            results, rejected = self._apply_data(batch, batch_id, steps)
            self._ahead.warm(self._merged)
            with steps("system"):
                self._write_rejected([*rejected, *bad], batch_id, batch.rows)
                self._write_logs(batch.found, batch_id, batch.topics)
                self._write_commits(batch_id, commits, batch.changes)
            with steps("state"):
                self._save_state(batch.changes, batch_id)
            self._finish(batch_id, results, started, steps)
            self._maintenance.between_batches()
        finally:
            batch.release()
            for frame in self._persisted:
                frame.unpersist()
            self._persisted.clear()
            self._merged.clear()

    def _scan(self, source: DataFrame, batch_id: int) -> ScannedBatch:
        """Read the batch once: the rows held back before in front, maybe a reload bet.

        While the scan job runs, :class:`~lakehouse_writer.route.ahead.Ahead` makes the tables it
        expects; :class:`~lakehouse_writer.read.holdback.Holdback` finds the transactions the
        batch holds whole; :class:`~lakehouse_writer.engines.spark.reload.ReloadBet` may write one
        topic's rows in the pass that reads them; :func:`~lakehouse_writer.read.scan.scan` reads,
        decodes and counts the rest, or, for a batch small enough for the driver to apply whole,
        :class:`~lakehouse_writer.read.driver_read.DriverRead` reads its offset ranges into the
        driver (by Spark's job should it give up) and :func:`~lakehouse_writer.read.scan.collect`
        counts them.
        """
        expected = self._ahead.batch_starts()
        reload: Speculation | None = None
        with self._ahead.while_scanning(expected):
            try:
                plan = self._holdback.plan(source, self.state, batch_id)
                if not plan.changed:  # the bet reads the batch's own offset ranges again
                    reload = self._reload.place(
                        plan.source, expected, batch_id, plan.ranges, self.state.stopped
                    )
                rows = plan.source if reload is None else reload.rest
                if rows is None:  # the reload is all the batch holds: nothing to scan
                    rows = self._spark.createDataFrame([], plan.source.schema)
                    found = BatchScan(rows)
                elif self._small_tables.takes_batch(plan.ranges, self.state.held):
                    raw = None
                    if reload is None and plan.reads is not None:  # no Spark job: rows as is
                        raw = self._driver_read.read(plan.reads)
                    found = collect(rows, self._system_topics, raw)
                    log.info(
                        "batch read into the driver batch=%d rows=%d by=%s",
                        batch_id,
                        len(found),
                        "spark" if raw is None else "consumer",
                    )
                else:
                    scanned = self._small_tables.scanned(expected, plan.ranges)
                    found = scan(rows, scanned, self._system_topics)
            except BaseException:
                if reload is not None:
                    reload.discard()
                raise
        offsets = found.offsets  # the highest offset read per partition
        if reload is not None:
            offsets.update(reload.offsets)
        for key, offset in plan.processed.items():  # up to a cut: held back after it
            offsets[key] = max(offset, offsets.get(key, -1))
        changes = BatchChanges(offsets=offsets, held=plan.held, awaits=plan.awaits)
        return ScannedBatch(rows, found, changes, reload)

    def _read_commits(
        self, found: BatchScan, topics: set[str]
    ) -> tuple[list[CommitRecord], list[DataFrame]]:
        """The batch's commit records (few: one per producer transaction), and bad ones."""
        from pyspark.sql import functions as F

        topic = self._settings.commits_topic
        if topic not in topics:
            return [], []
        records, bad = [], []
        for partition, offset, key, value in found.messages(topic):
            try:
                text = bytes(value or b"").decode("utf-8")
                records.append(CommitRecord.parse(text, topic, partition, offset))
            except (BadCommitRecord, UnicodeDecodeError) as exc:
                bad.append((topic, partition, offset, key, value, str(exc)))
        if not bad:
            return records, []
        frame = local_frame(self._spark, bad, _BAD_RECORD_SCHEMA)
        return records, [rejected_rows(frame, F.col("error"), COMMITS)]

    def _apply_data(
        self, batch: ScannedBatch, batch_id: int, steps: Steps
    ) -> tuple[list[ApplyResult], list[DataFrame]]:
        """Decode the batch's data rows, apply them table by table; commit its reload.

        The small tables go first, without Spark
        (:mod:`lakehouse_writer.engines.delta_rs.small_tables`); the rows of the tables it leaves
        are decoded and applied by Spark.

        The reload's rows are not in the batch's frame; should it hold rows of the reload's
        table all the same (from another topic), the reload's files are dropped and its rows
        applied with them (:meth:`~lakehouse_writer.engines.spark.reload.ReloadBet.settle`).
        """
        headers, changes = batch.found.headers, batch.changes
        data_topics = sorted(headers.keys() - self._system_topics)
        if not data_topics and batch.reload is None:
            return [], []
        stopped = dict(self.state.stopped)
        decoded = DecodedBatch()
        results: list[ApplyResult] = []
        with TableApplier(batch.rows.sparkSession, self._workers) as applier:
            if data_topics:
                tags = set().union(*(headers[t] for t in data_topics))
                with steps("small"):
                    small = self._small_tables.apply(
                        batch.found.rows_of,
                        {h: n for h, n in batch.found.rows.items() if h is not None},
                        batch.found.decoded.keys(),
                        stopped,
                        batch_id,
                        applier,
                        busy=None if batch.reload is None else batch.reload.info.ref,
                        topics_of=batch.found.topics_of,
                    )
                results += [self._record(r, changes) for r in small.results]
                tags -= small.headers
                with steps("decode"):
                    if tags:  # rows the small tables did not take: Spark's path
                        decoded = decode_batch(
                            batch.found.of_topics(data_topics),
                            self._catalog,
                            self._tables,
                            stopped,
                            tags,
                            batch.found.decoded,
                            applier,
                            batch.found.topics_of,
                        )
                for header, entry in decoded.schemas.items():
                    self._expected.saw(header, entry, decoded.keys.get(header, ()))
            changes.stopped = {t: e for t, e in stopped.items() if t not in self.state.stopped}
            with steps("apply"):
                try:
                    reload = self._reload.settle(batch.reload, decoded, batch_id)
                finally:
                    self._persisted += decoded.cached  # decoded once, read by every step after
                if reload is not None:
                    results.append(self._record(reload.commit(), changes))
                    self._expected.saw(reload.expected.header, reload.expected.entry)
                batch.reload = None  # committed, or discarded by settle
                outcomes = self._apply_tables(decoded, batch_id, applier)
        rejected = list(decoded.rejected)
        for outcome in outcomes:  # in table order, whichever finished first
            ref, (info, rows) = outcome.item
            if isinstance(outcome.error, LakehouseWriterError):
                error = outcome.error
                log.error("apply failed table=%s batch=%d error=%s", ref.qualified, batch_id, error)
                rejected.append(rejected_rows(rows, str(error), ref.qualified))
                continue
            if outcome.error is not None:
                raise outcome.error
            result = outcome.result
            assert result is not None
            results.append(self._record(result, changes))
            if not (result.fast_path or result.small or info.append_only):
                self._merged.append(info.path)
            if result.rejected is not None:
                rejected.append(result.rejected)
        return results, rejected

    def _record(self, result: ApplyResult, changes: BatchChanges) -> ApplyResult:
        """Note in the batch's state the table's new version and the TRUNCATEs applied."""
        changes.versions[result.table] = result.version
        changes.truncates += self._truncates.record(result.table, result.truncates)
        return result

    def _apply_tables(
        self, decoded: DecodedBatch, batch_id: int, applier: TableApplier
    ) -> list[Outcome[tuple[TableRef, tuple[TableInfo, DataFrame]], ApplyResult]]:
        """:func:`apply_batch` for each table of ``decoded``, on ``applier``'s threads.

        Each table runs on the worker's own session (its txn confs are its own); the rows
        it rejects come back on the batch's session.
        """
        applied = {ref: self._truncates.of(ref.qualified) for ref in decoded.tables}

        def one(
            item: tuple[TableRef, tuple[TableInfo, DataFrame]], session: SparkSession
        ) -> ApplyResult:
            ref, (info, rows) = item
            rows = on_session(rows, session)
            summary = decoded.summaries.get(ref)
            result = retry_on_conflict(
                lambda: apply_batch(
                    rows, batch_id, info, self._instance, applied[ref], summary, self._small
                ),
                f"table={ref.qualified} batch={batch_id}",
            )
            if result.rejected is None:
                return result
            return replace(result, rejected=on_session(result.rejected, applier.session))

        return applier.map(one, list(decoded.tables.items()))

    def _write_rejected(self, rejected: list[DataFrame], batch_id: int, batch: DataFrame) -> None:
        union = reduce(lambda a, b: a.unionByName(b), rejected) if rejected else None
        if union is None:
            self.last.rejected = 0
            return
        union = with_raw_bytes(union, batch).persist()
        self.last.rejected = union.count()
        if self.last.rejected:
            append_system(union, f"{self._lake}/{REJECTED}", self._instance, batch_id)
            log.warning(
                "rows rejected batch=%d rows=%d table=%s", batch_id, self.last.rejected, REJECTED
            )
        union.unpersist()

    def _write_logs(self, found: BatchScan, batch_id: int, topics: set[str]) -> None:
        s = self._settings
        for topic, table in (
            (s.execution_log_topic, "_execution_log"),
            (s.lineage_topic, "_lineage"),
        ):
            if topic in topics:
                frame = log_rows(found.of_topics([topic]), table)
                self._append_system(frame, table, batch_id)

    def _write_commits(
        self, batch_id: int, commits: list[CommitRecord], changes: BatchChanges
    ) -> None:
        """Write the ``_commits`` rows of every commit now complete; keep the others pending."""
        state, ours = self.state, self._ours
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

    def _save_state(self, changes: BatchChanges, batch_id: int) -> None:
        """Append the batch's changes to ``_writer_state`` (compacted now and then)."""
        self._store.append(changes, batch_id)
        self.state.apply(changes, batch_id)
        if (batch_id + 1) % COMPACT_EVERY == 0:
            self._store.compact(self.state)

    def _finish(
        self, batch_id: int, results: list[ApplyResult], started: float, steps: Steps
    ) -> None:
        self.last.batch_id = batch_id
        self.last.rows = {r.table: sum(r.rows.values()) for r in results}
        self.last.finished_at = datetime.now(UTC).isoformat()
        self.last.pending_commits = len(self.state.pending)
        self.last.stopped_tables = dict(self.state.stopped)
        log.info(
            "batch done batch=%d rows=%s rejected=%d seconds=%.1f steps=%s",
            batch_id,
            self.last.rows,
            self.last.rejected,
            time.monotonic() - started,
            steps,
        )
        write_status(self._settings.checkpoint_path, self.last)


def _stop_between_batches(query: StreamingQuery, processor: BatchProcessor) -> None:
    """Let the running batch finish (and Spark record it in the checkpoint), then stop."""
    processor.close()  # returns once the running batch's writes are done; refuses new ones
    deadline = time.monotonic() + _STOP_WAIT_S
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)  # the checkpoint's commit log entry is written after foreachBatch
    query.stop()


def whole_names(regex: str) -> str:
    """``regex`` anchored to whole topic names.

    Spark's Kafka source finds the pattern anywhere in a name (``Regex.findFirstIn``): alone,
    ``orders`` would subscribe ``backorders`` too. The writer's own topic filter
    (:class:`~lakehouse_writer.read.topics.TopicPattern`) and the docs mean the whole name.
    """
    return f"^(?:{regex})$"


def start(
    spark: SparkSession,
    settings: LakehouseSettings,
    once: bool,
    connect_timeout_s: float | None = None,
) -> tuple[StreamingQuery, BatchProcessor]:
    """Start the streaming query (``once``: drain what is there with availableNow).

    Raises:
        TopicPatternError: Java refuses the topics regex (checked first).
        KafkaUnreachable: Kafka did not answer within ``connect_timeout_s``.
        CheckpointMismatch: The checkpoint and the lakehouse do not belong together, or
            another writer started with the same new checkpoint (:class:`CheckpointInUse`).
    """
    require_classic(spark)
    ours = TopicPattern(spark, settings.topics_regex)
    probe_kafka(settings.kafka_client_conf(), connect_timeout_s or settings.connect_timeout_s)
    options: dict[str, Any] = source_options(settings)
    options["subscribePattern"] = whole_names(settings.topics_regex)
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    fresh = CheckpointFiles(settings.checkpoint_path, spark).read("metadata") is None
    instance = ids.instance_id(settings.checkpoint_path)
    if fresh:  # a new (or lost) checkpoint: no other instance may have applied our topics
        system = {
            settings.commits_topic,
            settings.execution_log_topic,
            settings.lineage_topic,
            settings.schemas_topic,
        }
        check_checkpoint(
            spark,
            settings.lakehouse_path,
            settings.checkpoint_path,
            instance,
            lambda topic: topic not in system and ours(topic),
        )
    processor = BatchProcessor(spark, settings, instance, warm=not once, ours=ours)
    if processor.registry is not None:  # a login that fails stops the start, not every row
        processor.registry.check()
    if not fresh:  # a used checkpoint: the lakehouse must hold what it applied
        last = processor.state.last_batch
        check_lakehouse(spark, settings.lakehouse_path, settings.checkpoint_path, instance, last)
    writer = (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .writeStream.foreachBatch(processor)
        .option("checkpointLocation", settings.checkpoint_path)
        .queryName(f"lakehouse-writer-{instance[:8]}")  # unique among a session's queries
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_s} seconds")
    log.info(
        "writer started topics=%s lakehouse=%s checkpoint=%s once=%s",
        settings.topics_regex,
        settings.lakehouse_path,
        settings.checkpoint_path,
        once,
    )
    try:
        return writer.start(), processor
    except BaseException as exc:
        processor.close()
        lost = concurrent_start(root_cause(exc), settings.checkpoint_path)
        if lost is not None:
            raise lost from exc
        raise


def run(
    spark: SparkSession,
    settings: LakehouseSettings,
    once: bool,
    stop: threading.Event | None = None,
    connect_timeout_s: float | None = None,
) -> None:
    """Run the writer until it drains (``once``), fails, or ``stop`` is set.

    On ``stop`` the running batch, if any, finishes; then the query stops. The status file
    ends with state ``drained``, ``stopped`` or ``failed`` (with the root cause). ``once``
    starts a new query while the last one ended with rows held back (:func:`_held_at_end`).

    Raises:
        WriterFailed: The run failed (a bad topics regex, Kafka not answering within
            ``connect_timeout_s``, a failed batch or query); the message is the root cause.
    """
    processor: BatchProcessor | None = None
    stop = stop or threading.Event()
    try:
        for attempt in range(1, ONCE_QUERIES + 1):
            query, processor = start(spark, settings, once, connect_timeout_s)
            write_status(settings.checkpoint_path, processor.last)  # "running": resume-table
            _drive(query, processor, settings.checkpoint_path, stop)
            if not (once and not stop.is_set() and _held_at_end(processor, attempt)):
                break
            processor.close()
    except Exception as exc:
        stats, known = (processor.last, processor.failure) if processor else (None, None)
        raise report_failure(settings, exc, stats, known) from exc


def _held_at_end(processor: BatchProcessor, attempt: int) -> bool:
    """True when a ``run --once`` query ended with rows held back and is to be run again.

    A query with ``availableNow`` plans its end offsets when it starts. Rows it holds back at
    its end wait for partitions of their transaction it did not plan: a partition whose end
    it fixed before the transaction committed, or a topic its Kafka source did not list
    (seen with hundreds of topics made just before the writer started: a batch planned 250
    of 500). A new query plans again; after :data:`ONCE_QUERIES` the run ends, and says so.
    """
    held = processor.state.held
    if not held:
        return False
    partitions = ", ".join(f"{t}/{p}" for t, p in sorted(held)[:5])
    more = f" and {len(held) - 5} more" if len(held) > 5 else ""
    if attempt >= ONCE_QUERIES:
        log.warning(
            "run --once ends with rows held back partitions=%d (%s%s): their transactions "
            "wait for partitions the writer has not read; the next run applies them",
            len(held),
            partitions,
            more,
        )
        return False
    log.warning(
        "query ended with rows held back partitions=%d (%s%s): reading again (query %d of %d)",
        len(held),
        partitions,
        more,
        attempt + 1,
        ONCE_QUERIES,
    )
    return True


def _drive(
    query: StreamingQuery, processor: BatchProcessor, checkpoint: str, stop: threading.Event
) -> None:
    """Wait for the query to end, recording lag; stop it between batches when asked."""
    while not query.awaitTermination(1):
        record_lag(query, processor.last, checkpoint)
        if stop.is_set():
            log.info("stop requested; stopping after the current batch")
            _stop_between_batches(query, processor)
            break
    record_lag(query, processor.last, checkpoint)
    exc = query.exception()
    if exc is not None and not (stop.is_set() and processor.refused):
        raise exc
    processor.last.state = "stopped" if stop.is_set() else "drained"
    write_status(checkpoint, processor.last)
    log.info("writer %s last_batch=%d", processor.last.state, processor.last.batch_id)
