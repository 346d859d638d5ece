"""The streaming query: Kafka (read_committed) → foreachBatch → Delta tables.

:class:`BatchProcessor` is what ``foreachBatch`` calls. Per micro-batch it reads, decodes and
caches the batch in one pass and finds the highest offset of every topic partition
(:mod:`lakehouse_writer.scan`), decodes the rows of schemas it did not expect
(:mod:`lakehouse_writer.read`) and applies them per table (:mod:`lakehouse_writer.apply`; the
tables of a batch are created, and applied, several at a time: :mod:`lakehouse_writer.parallel`),
appends ``_rejected``, ``_execution_log`` and ``_lineage``, writes the ``_commits`` rows of
the commits now complete (:mod:`lakehouse_writer.commits`), and last the batch's state
(:mod:`lakehouse_writer.state`; it holds the TRUNCATEs applied, too). Every write is
idempotent per batch id, so a replay after a crash is harmless; a batch the state already
holds is skipped outright. While the scan job runs, a second thread creates what the batch
will write to and is missing (:meth:`BatchProcessor._make_ahead`); a running writer builds,
between batches, the Delta state of the tables it just merged into
(:meth:`BatchProcessor._warm_up`). Failed runs: :mod:`~lakehouse_writer.failure`; the checks
before the query starts: :mod:`~lakehouse_writer.topics`, :mod:`~lakehouse_writer.probe`.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING, Any

from lakehouse_writer import txn
from lakehouse_writer.apply import ApplyResult, apply_batch
from lakehouse_writer.catalog import SchemaCatalog
from lakehouse_writer.checkpoint_guard import check_checkpoint
from lakehouse_writer.commits import BadCommitRecord, CommitRecord, commit_frame
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.failure import Failure, report_failure, root_cause, secrets_of
from lakehouse_writer.holdback import Holdback
from lakehouse_writer.parallel import Outcome, TableApplier, on_session, workers_from_env
from lakehouse_writer.probe import connect_timeout, probe_kafka
from lakehouse_writer.ranges import OffsetRanges
from lakehouse_writer.read import (
    DecodedBatch,
    decode_batch,
    source_options,
    with_raw_bytes,
)
from lakehouse_writer.reload import Speculation, speculate
from lakehouse_writer.scan import BatchScan, Expected, ExpectedSchemas, scan
from lakehouse_writer.session import require_classic
from lakehouse_writer.small import SmallChanges
from lakehouse_writer.state import COMPACT_EVERY, STATE, BatchChanges, StateStore, WriterState
from lakehouse_writer.status import BatchStats, lag_of, record_lag, write_status
from lakehouse_writer.storage import CheckpointFiles
from lakehouse_writer.system_tables import (
    REJECTED,
    append_system,
    local_frame,
    log_rows,
    rejected_rows,
)
from lakehouse_writer.tables import (
    TableInfo,
    TableManager,
    TableRef,
    compute_state,
    no_data_files,
)
from lakehouse_writer.timing import Steps
from lakehouse_writer.topics import TopicPattern
from lakehouse_writer.truncate import TruncateLog
from producer_lib.errors import SchemaError
from producer_lib.schema.framing import single_object_header

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["BatchProcessor", "lag_of", "run", "start"]

log = logging.getLogger(__name__)

COMMITS = "_commits"
LEGACY_TRUNCATES = "_truncates"  # where earlier versions kept the TRUNCATE log
_STOP_WAIT_S = 60.0  # bound on waiting for Spark to record the last batch on a stop
_BAD_RECORD_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, error STRING"
)


class WriterStopping(LakehouseWriterError):
    """A batch arrived after a stop was requested; it is left for the next start."""


class BatchProcessor:
    """The ``foreachBatch`` function of the writer.

    Args:
        spark: The session.
        settings: Where to read and write.
        instance_id: The writer instance id of the checkpoint (Delta txnAppId).
        warm: Build the state of merged tables between batches (:meth:`_warm_up`); for a
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
            settings.kafka_client_conf(), settings.schemas_topic, settings.schema_registry_url
        )
        self._store = StateStore(spark, f"{self._lake}/{STATE}", instance_id)
        self._state: WriterState | None = None
        self._ours = ours or TopicPattern(spark, settings.topics_regex)
        self._secrets = secrets_of(settings)
        self.failure: Failure | None = None
        self._persisted: list[DataFrame] = []
        self._merged: list[str] = []  # paths of the tables merged into by the running batch
        self._expected = ExpectedSchemas()
        self._workers = workers_from_env()  # tables applied at once (lakehouse_writer.parallel)
        self._small = SmallChanges(settings.small_merge_rows)  # few rows: merged by delta-rs
        self._holdback = Holdback(
            settings.kafka_client_conf(),
            source_options(settings),
            settings.commits_topic,
            self._ours,
        )
        self._creatable: set[bytes] = set()  # headers whose missing table is made ahead
        self._ahead: set[bytes] = set()  # headers whose table is known to exist
        self._declined: set[bytes] = set()  # headers whose reload bet was lost (not again)
        self._source_options = source_options(settings)
        self._truncates = TruncateLog(
            spark, f"{self._lake}/{STATE}", f"{self._lake}/{LEGACY_TRUNCATES}"
        )
        self._gate = threading.Lock()
        self._closed = False
        self.refused = False
        self.last = BatchStats()
        # Driver work that does not need the batch's rows runs on this thread, overlapping
        # the query's start-up and each batch's scan job (the driver is idle during both).
        self._aside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer-aside")
        self._tables_ready = threading.Event()
        self._aside.submit(self._start_up)
        self._warm = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer-warm") if warm else None
        )
        self._batch_started = threading.Event()  # stops the warm-up at its next table

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
        self._aside.shutdown(wait=False)
        self._holdback.close()
        if self._warm is not None:
            self._warm.shutdown(wait=False, cancel_futures=True)

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
        from pyspark import inheritable_thread_target

        started, steps = time.monotonic(), Steps()
        self._batch_started.set()
        self._tables_ready.wait()  # set by _start_up, which never fails
        reload: Speculation | None = None
        with steps("scan"):
            if not self._expected:
                self._expect_from_catalog()
            expected = self._expected.guess()
            scanned = threading.Event()
            inherit = inheritable_thread_target(self._spark)  # the stream's job properties
            prepared = self._aside.submit(inherit(self._make_ahead), expected, scanned)
            try:
                plan = self._holdback.plan(source, self.state, batch_id)
                source = plan.source
                if not plan.changed:  # the bet reads the batch's own offset ranges again
                    reload = self._speculate(source, expected, batch_id, plan.ranges)
                batch = source if reload is None else reload.rest
                if batch is None:  # the reload is all the batch holds: nothing to scan
                    batch = self._spark.createDataFrame([], source.schema)
                    found = BatchScan(batch)
                else:
                    found = scan(batch, expected, self._system_topics)
            except BaseException:
                if reload is not None:
                    reload.discard()
                raise
            finally:
                scanned.set()
                prepared.result()  # never raises: what failed is done again on the batch's path
        df = found.frame  # cached by the scan: unpersisted below
        try:
            if reload is not None:
                found.offsets.update(reload.offsets)
            for key, offset in plan.processed.items():  # up to a cut: held back after it
                found.offsets[key] = max(offset, found.offsets.get(key, -1))
            changes = BatchChanges(offsets=found.offsets, held=plan.held, awaits=plan.awaits)
            topics = {topic for topic, _ in found.offsets}
            with steps("commits"):
                commits, bad = self._read_commits(df, topics)
            results, rejected = self._apply_data(df, batch_id, found, changes, steps, reload)
            reload = None  # committed or discarded
            self._warm_up()
            with steps("system"):
                self._write_rejected([*rejected, *bad], batch_id, batch)
                self._write_logs(df, batch_id, topics)
                self._write_commits(batch_id, commits, changes)
            with steps("state"):
                self._store.append(changes, batch_id)
                self.state.apply(changes, batch_id)
                if (batch_id + 1) % COMPACT_EVERY == 0:
                    self._store.compact(self.state)
            self._finish(batch_id, results, started, steps)
        finally:
            if reload is not None:  # the batch failed before its reload was committed
                reload.discard()
            for frame in self._persisted:
                frame.unpersist()
            self._persisted.clear()
            self._merged.clear()
            df.unpersist()

    def _start_up(self) -> None:
        """While the query starts: read the catalog, then :meth:`_make_ahead`."""
        try:
            self._expect_from_catalog()
        except Exception as exc:  # noqa: BLE001 - the batch reads it again
            log.warning(
                "schema catalog not read at start-up error=%s", root_cause(exc, self._secrets)
            )
        self._make_ahead(self._expected.guess())

    def _warm_up(self) -> None:
        """Build the Delta state of the tables the batch merged into, until a batch starts.

        A MERGE or DELETE reads its table's state first — its files and transaction ids,
        which Spark jobs rebuild from the log after every commit: about 1 s of a 10-row
        MERGE's 2.5 s on two cores (:func:`~lakehouse_writer.tables.compute_state`). A
        running writer is mostly idle until its next trigger; from the moment the batch's
        tables are applied (while it writes the system tables and its state, and after),
        another thread builds them for the tables it will likely merge into again, and the
        next MERGE finds them built (the same snapshot: no one else writes them). Once the
        next batch starts, the tables not yet begun are left to it. A failure is only
        logged: the MERGE builds the state itself.
        """
        if self._warm is None or not self._merged:
            return
        paths = list(self._merged)
        self._batch_started.clear()

        def build() -> None:
            for path in paths:
                if self._batch_started.is_set():
                    return
                try:
                    compute_state(self._spark, path)
                except Exception as exc:  # noqa: BLE001 - the MERGE builds it itself
                    log.debug("table state not built ahead path=%s error=%s", path, exc)

        self._warm.submit(build)

    def _speculate(
        self,
        source: DataFrame,
        expected: list[Expected],
        batch_id: int,
        ranges: OffsetRanges | None,
    ) -> Speculation | None:
        """Bet that the batch's rows of one topic are a reload, and write them in one pass.

        ``ranges``: the batch's offset ranges (None: not known, no bet).

        The bet is made on the topic with the most offsets in the batch, at least
        ``reload_one_pass_min_rows``, whose only writer schema is expected and whose table
        is empty (:mod:`lakehouse_writer.reload`). None: no bet, or a lost one (its files
        are deleted; the table is not bet on again) — the batch takes the normal path. A
        table found holding rows is not looked at again, so later batches pay nothing.
        """
        limit = self._settings.reload_one_pass_min_rows
        empty: list[tuple[Expected, TableInfo]] = []
        for e in expected if limit else ():
            if e.header not in self._creatable or e.header in self._declined:
                continue
            if TableRef.of(e.schema).qualified in self.state.stopped:
                continue
            try:
                info = self._tables.ensure(e.schema)
            except LakehouseWriterError:
                continue  # the normal path reports it
            if info.append_only or not no_data_files(self._spark, info.path):
                self._declined.add(e.header)  # it holds rows: no bet from now on (no cost)
                continue
            empty.append((e, info))
        if not (empty and ranges):
            return None
        spans: dict[str, int] = {}
        for (topic, _), (first, end) in ranges.items():
            spans[topic] = spans.get(topic, 0) + end - first
        bet, info = max(empty, key=lambda c: spans.get(c[0].entry.topic or "", 0))
        if spans.get(bet.entry.topic or "", 0) < limit:
            return None
        ref = info.ref
        outcome = speculate(
            source,
            self._source_options,
            ranges,
            bet,
            info,
            txn.app_id_for(self._instance, ref.qualified),
            txn.txn_version(batch_id, txn.STEP_ROWS),
            self._truncates.of(ref.qualified),
        )
        if isinstance(outcome, str):
            self._declined.add(bet.header)
            log.info(
                "reload not written in one pass table=%s batch=%d reason=%s",
                ref.qualified,
                batch_id,
                outcome,
            )
            return None
        return outcome

    def _make_ahead(self, expected: list[Expected], scanned: threading.Event | None = None) -> None:
        """Create what batches will write to and is missing, off the batch's path.

        That is the missing tables of the expected schemas that are the only writer schema
        of their table (:meth:`_expect_from_catalog`): whatever rows of it a batch holds,
        the table is the one they would create (so a table may appear once its schema is
        registered, before its first rows); then ``_writer_state`` on a fresh lakehouse. It
        runs while the query starts (:meth:`_start_up`) and while each batch's scan job runs,
        when it stops at the first table after the scan is done. A table found is not looked
        up again. A failure is only logged: the batch then creates the table on its path,
        and reports the error.
        """
        try:
            for e in expected:
                if scanned is not None and scanned.is_set():
                    break
                if e.header in self._creatable - self._ahead:
                    self._tables.create_missing(e.schema)
                    self._ahead.add(e.header)
            self._tables_ready.set()  # a batch may start; its state is written last
            self._store.create()
        except Exception as exc:  # noqa: BLE001 - done again, and reported, on the batch's path
            log.warning(
                "creating tables ahead of the batch failed error=%s", root_cause(exc, self._secrets)
            )
        finally:
            self._tables_ready.set()

    def _expect_from_catalog(self) -> None:
        """A cold start expects the latest value schema of every subscribed topic."""
        try:
            latest = self._catalog.latest_value_schemas()
        except LakehouseWriterError as exc:  # the batch decodes what it finds all the same
            log.warning("schema catalog not read; nothing expected error=%s", exc)
            return
        candidates = []
        for fingerprint, entry in latest:
            if not (entry.topic and self._ours(entry.topic)):
                continue
            try:
                candidates.append((single_object_header(bytes.fromhex(fingerprint)), entry))
            except (ValueError, SchemaError):  # a bad catalog record: its rows decode later
                log.warning("catalog fingerprint not usable fingerprint=%s", fingerprint)
        self._expected.seed(candidates)
        self._creatable = _sole_schemas(self._expected.guess(), self._catalog.value_schema_counts())

    def _read_commits(
        self, df: DataFrame, topics: set[str]
    ) -> tuple[list[CommitRecord], list[DataFrame]]:
        """The batch's commit records (few: one per producer transaction), and bad ones."""
        from pyspark.sql import functions as F

        topic = self._settings.commits_topic
        if topic not in topics:
            return [], []
        messages = (
            df.filter(F.col("topic") == topic)
            .select("partition", "offset", "key", "value")
            .collect()
        )
        records, bad = [], []
        for m in messages:
            try:
                text = bytes(m.value or b"").decode("utf-8")
                records.append(CommitRecord.parse(text, topic, m.partition, m.offset))
            except (BadCommitRecord, UnicodeDecodeError) as exc:
                bad.append((topic, m.partition, m.offset, m.key, m.value, str(exc)))
        if not bad:
            return records, []
        frame = local_frame(self._spark, bad, _BAD_RECORD_SCHEMA)
        return records, [rejected_rows(frame, F.col("error"), COMMITS)]

    def _apply_data(
        self,
        df: DataFrame,
        batch_id: int,
        found: BatchScan,
        changes: BatchChanges,
        steps: Steps,
        reload: Speculation | None = None,
    ) -> tuple[list[ApplyResult], list[DataFrame]]:
        """Apply the batch's data rows table by table, and commit ``reload``'s files.

        ``reload``'s rows are not in ``df``; should ``df`` hold rows of its table all the
        same (from another topic), its files are dropped and its rows applied with them.
        """
        from pyspark.sql import functions as F

        headers = found.headers
        data_topics = sorted(headers.keys() - self._system_topics)
        if not data_topics and reload is None:
            return [], []
        stopped = dict(self.state.stopped)
        decoded = DecodedBatch()
        with TableApplier(df.sparkSession, self._workers) as applier:
            if data_topics:
                data = df.filter(F.col("topic").isin(*data_topics))
                tags = set().union(*(headers[t] for t in data_topics))
                with steps("decode"):
                    decoded = decode_batch(
                        data, self._catalog, self._tables, stopped, tags, found.decoded, applier
                    )
                self._persisted += decoded.cached  # decoded once, read by every step after
                for header, entry in decoded.schemas.items():
                    self._expected.saw(header, entry, decoded.keys.get(header, ()))
            changes.stopped = {t: e for t, e in stopped.items() if t not in self.state.stopped}
            with steps("apply"):
                reload = self._settle(reload, decoded, batch_id)
            results = self._commit_reload(reload, changes, steps)
            with steps("apply"):
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
            results.append(result)
            if not (result.fast_path or result.small or info.append_only):
                self._merged.append(info.path)
            changes.versions[result.table] = result.version
            changes.truncates += self._truncates.record(result.table, result.truncates)
            if result.rejected is not None:
                rejected.append(result.rejected)
        return results, rejected

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
            result = apply_batch(
                rows, batch_id, info, self._instance, applied[ref], summary, self._small
            )
            if result.rejected is None:
                return result
            return replace(result, rejected=on_session(result.rejected, applier.session))

        return applier.map(one, list(decoded.tables.items()))

    def _settle(
        self, reload: Speculation | None, decoded: DecodedBatch, batch_id: int
    ) -> Speculation | None:
        """``reload`` when its files are to be committed; else its rows join ``decoded``.

        They are not when a key repeats, or when the rest of the batch holds rows of its
        table (from another topic): then its files are deleted and its rows, read again,
        are applied the normal way, with those of the rest.
        """
        if reload is None:
            return None
        ref = reload.info.ref
        if ref in decoded.tables:
            reason = "the batch holds rows of its table from another topic"
        elif not reload.unique():
            reason = "a key repeats"
        else:
            return reload
        log.info(
            "reload not written in one pass table=%s batch=%d reason=%s",
            ref.qualified,
            batch_id,
            reason,
        )
        reload.discard()
        self._declined.add(reload.expected.header)
        rows = reload.rows().persist()
        self._persisted.append(rows)
        info = reload.info
        if ref in decoded.tables:
            info, others = decoded.tables[ref]
            rows = others.unionByName(rows, allowMissingColumns=True)
            decoded.summaries.pop(ref, None)  # apply_batch summarizes them all
        decoded.tables[ref] = (info, rows)
        return None

    def _commit_reload(
        self, reload: Speculation | None, changes: BatchChanges, steps: Steps
    ) -> list[ApplyResult]:
        if reload is None:
            return []
        with steps("apply"):
            result = reload.commit()
        changes.versions[result.table] = result.version
        changes.truncates += self._truncates.record(result.table, result.truncates)
        self._expected.saw(reload.expected.header, reload.expected.entry)
        return [result]

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

    def _write_logs(self, df: DataFrame, batch_id: int, topics: set[str]) -> None:
        from pyspark.sql import functions as F

        s = self._settings
        for topic, table in (
            (s.execution_log_topic, "_execution_log"),
            (s.lineage_topic, "_lineage"),
        ):
            if topic in topics:
                frame = log_rows(df.filter(F.col("topic") == topic), table)
                append_system(frame, f"{self._lake}/{table}", self._instance, batch_id)

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
            frame = commit_frame(self._spark, ordered, versions, ours, stopped)
            append_system(frame, f"{self._lake}/{COMMITS}", self._instance, batch_id)
        if waiting:
            log.info(
                "commits batch=%d written=%d pending=%d",
                batch_id,
                len(complete),
                len(waiting) - len(complete),
            )

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


def _sole_schemas(expected: list[Expected], counts: dict[str, int]) -> set[bytes]:
    """Headers of the schemas that are the only value schema of their topic and table.

    A table created from another schema than its rows' might take an older schema's rows
    as an incompatible change (a column narrowed back): only these are created ahead.
    """
    tables = [TableRef.of(e.schema) for e in expected]
    return {
        e.header
        for e, ref in zip(expected, tables, strict=True)
        if e.entry.topic and counts.get(e.entry.topic) == 1 and tables.count(ref) == 1
    }


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
    (:class:`~lakehouse_writer.topics.TopicPattern`) and the docs mean the whole name.
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
    """
    require_classic(spark)
    ours = TopicPattern(spark, settings.topics_regex)
    probe_kafka(settings.kafka_client_conf(), connect_timeout(connect_timeout_s))
    options: dict[str, Any] = source_options(settings)
    options["subscribePattern"] = whole_names(settings.topics_regex)
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    fresh = CheckpointFiles(settings.checkpoint_path, spark).read("metadata") is None
    instance = txn.instance_id(settings.checkpoint_path)
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
    except BaseException:
        processor.close()
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
    ends with state ``drained``, ``stopped`` or ``failed`` (with the root cause).

    Raises:
        WriterFailed: The run failed (a bad topics regex, Kafka not answering within
            ``connect_timeout_s``, a failed batch or query); the message is the root cause.
    """
    processor: BatchProcessor | None = None
    try:
        query, processor = start(spark, settings, once, connect_timeout_s)
        write_status(settings.checkpoint_path, processor.last)  # "running": status, resume-table
        _drive(query, processor, settings.checkpoint_path, stop or threading.Event())
    except Exception as exc:
        stats, known = (processor.last, processor.failure) if processor else (None, None)
        raise report_failure(settings, exc, stats, known) from exc


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
