"""One micro-batch, as its steps: scan → decode, route and apply per table → system → state.

:class:`BatchProcessor` is what ``foreachBatch`` calls (:mod:`lakehouse_writer.stream.job` starts
the query). :meth:`BatchProcessor._process` is the batch:

1. **scan** (:class:`~lakehouse_writer.read.reader.BatchReader`): the batch read once, whole
   transactions only, rows held back before in front;
2. **commit records** (:class:`~lakehouse_writer.commit.system_step.SystemStep`): what each
   producer transaction wrote;
3. **tables** (:class:`~lakehouse_writer.route.tables_step.TablesStep`): the rows decoded,
   each table routed to an engine and applied by the same rules;
4. **system tables**: ``_rejected``, ``_execution_log``, ``_lineage``, ``_commits``;
5. **state** (:class:`~lakehouse_writer.commit.state.StateStore`): so a batch the state
   holds is a batch whose every write happened; a replay of it is skipped;
6. **catalog** (:class:`~lakehouse_writer.tables.catalog.TableCatalog`, with
   ``LAKEHOUSE_CATALOG`` only): the tables created since registered by name.

Every write is idempotent per batch id. What is built around this path to make it fast —
tables made while the scan runs, a reload written in the pass that reads it, small tables
in the driver — are objects of their own, given to the steps.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakehouse_writer.commit.state import (
    COMPACT_EVERY,
    STATE,
    BatchChanges,
    StateStore,
    WriterState,
)
from lakehouse_writer.commit.system_step import SystemStep
from lakehouse_writer.commit.truncate_log import TruncateLog
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.engines.spark.reload import ReloadBet
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.catalog import RegistryLookups, SchemaCatalog
from lakehouse_writer.read.decode import source_options
from lakehouse_writer.read.driver_read import DriverRead
from lakehouse_writer.read.holdback import Holdback
from lakehouse_writer.read.reader import BatchReader
from lakehouse_writer.read.scan import ExpectedSchemas
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.route.ahead import Ahead
from lakehouse_writer.route.driver_tables import DriverTables
from lakehouse_writer.route.router import Router
from lakehouse_writer.route.tables_step import Applied, TablesStep
from lakehouse_writer.runtime.failure import Failure, secrets_of
from lakehouse_writer.runtime.status import BatchStats, write_status
from lakehouse_writer.tables.catalog import TableCatalog
from lakehouse_writer.tables.manager import TableManager
from lakehouse_writer.tables.scheduled import ScheduledMaintenance
from producer_lib.timing import Steps

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.engines.base import ApplyResult
    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["BatchProcessor", "WriterStopping"]

log = logging.getLogger(__name__)

LEGACY_TRUNCATES = "_truncates"  # where earlier versions kept the TRUNCATE log


class WriterStopping(LakehouseWriterError):
    """A batch arrived after a stop was requested; it is left for the next start."""


class BatchProcessor:
    """The ``foreachBatch`` function of the writer.

    Args:
        spark: The session.
        settings: Where to read and write.
        instance_id: The writer instance id of the checkpoint (Delta txnAppId).
        warm: Build the state of merged tables between batches
            (:meth:`~lakehouse_writer.route.ahead.Ahead.warm`); for a writer that waits for
            its next trigger, not one that drains and exits.
        ours: The topics regex as the JVM compiled it; None compiles ``topics_regex``.

    Attributes:
        failure: Why a batch failed (the query knows only a Python proxy's text of it).
        refused: A batch came after :meth:`close` (it was left for the next start).
        last: What the last batch did (the status file's content).
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: LakehouseSettings,
        instance_id: str,
        warm: bool = False,
        ours: TopicPattern | None = None,
    ) -> None:
        lake = settings.lakehouse_path.rstrip("/")
        self._settings, self._instance = settings, instance_id
        self._secrets = secrets_of(settings)
        self._store = StateStore(spark, f"{lake}/{STATE}", instance_id)
        self._state: WriterState | None = None
        ours = ours or TopicPattern(spark, settings.topics_regex)
        system = {
            settings.commits_topic,
            settings.execution_log_topic,
            settings.lineage_topic,
            settings.schemas_topic,
        }
        tables = TableManager(spark, lake, settings.reader_policy)
        self._table_manager = tables
        self._names = (
            TableCatalog(spark, settings.catalog, settings.catalog_system_namespace, lake)
            if settings.catalog
            else None
        )
        if self._names is not None:  # tables made before the catalog was configured
            self._names.check()
            log.info(
                "tables registered at start catalog=%s tables=%d",
                settings.catalog,
                self._names.register_found(),
            )
        self._catalog = SchemaCatalog(
            settings.kafka_client_conf(), settings.schemas_topic, settings.registry
        )
        expected = ExpectedSchemas()
        truncates = TruncateLog(spark, f"{lake}/{STATE}", f"{lake}/{LEGACY_TRUNCATES}")
        router = Router(
            DeltaRsWrites(settings.small_merge_rows), lake, settings.driver_read_rows, instance_id
        )
        driver = DriverTables(router, tables, self._catalog, truncates)
        self._router = router
        self._ahead = Ahead(
            spark,
            self._catalog,
            tables,
            expected,
            ours,
            self._store.create,
            self._secrets,
            warm,
            # Not the driver's consumer: one made ahead of its first assign fetched later
            # than one made then (docs/PERFORMANCE.md).
            warm_ups=(driver.warm_up,),
        )
        reload = ReloadBet(
            spark,
            tables,
            settings.reload_one_pass_min_rows,
            source_options(settings),
            instance_id,
            truncates,
            self._ahead.creatable,
        )
        holdback = Holdback(
            settings.kafka_client_conf(), source_options(settings), settings.commits_topic, ours
        )
        self._reader = BatchReader(
            spark,
            holdback,
            DriverRead(settings.kafka_client_conf()),  # a small batch read without a job
            router,
            self._ahead,
            reload,
            system,
        )
        self._tables = TablesStep(
            router,
            driver,
            tables,
            self._catalog,
            truncates,
            expected,
            reload,
            settings.apply_workers,
            system,
        )
        self._truncates = truncates
        self._system = SystemStep(spark, settings, instance_id, ours)
        self._maintenance = ScheduledMaintenance(  # opt-in: LAKEHOUSE_MAINTAIN_INTERVAL_S
            spark,
            lake,
            settings.maintain_interval_s,
            settings.maintain_budget_s,
            settings=settings.maintain,
        )
        self._gate = threading.Lock()
        self._closed = False
        self.failure: Failure | None = None
        self.refused = False
        self.last = BatchStats()

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

    def close(self) -> None:
        """Refuse batches from now on; returns once the running batch, if any, is done."""
        with self._gate:
            self._closed = True
        self._ahead.close()
        self._reader.close()

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
        """The batch, as its steps (see the module docstring)."""
        started, steps, state = time.monotonic(), Steps(), self.state
        with steps("scan"):
            batch = self._reader.scan(source, batch_id, state)
        applied = Applied()
        try:
            with steps("commits"):
                commits, bad = self._system.commit_records(batch)
            applied = self._tables.apply(batch, batch_id, dict(state.stopped), steps)
            self._ahead.warm(applied.merged)
            changes = self._changes(batch.offsets, batch.held, batch.awaits, applied)
            with steps("system"):
                rejected = [*applied.rejected, *bad]
                self.last.rejected = self._system.write(
                    batch, rejected, commits, changes, state, batch_id
                )
            with steps("state"):
                self._save_state(changes, batch_id)
            if self._names is not None:
                with steps("catalog"):  # after the state: a failure loses and repeats nothing
                    written = {*self._system.written, STATE}
                    self._names.register_new(self._table_manager.created_tables(), written)
            self._finish(batch_id, applied.results, started, steps)
            self._maintenance.between_batches()
        finally:
            batch.release()
            for frame in applied.cached:
                frame.unpersist()

    def _changes(
        self,
        offsets: dict[tuple[str, int], int],
        held: dict[tuple[str, int], tuple[int, int]],
        awaits: dict[int, int],
        applied: Applied,
    ) -> BatchChanges:
        """What the batch changes in the writer's state: offsets, versions, TRUNCATEs."""
        changes = BatchChanges(offsets=offsets, held=held, awaits=awaits, stopped=applied.stopped)
        for result in applied.results:
            changes.versions[result.table] = result.version
            changes.truncates += self._truncates.record(result.table, result.truncates)
        return changes

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
        self.last.off_fast_path = dict(self._router.off_fast_path)
        log.info(
            "batch done batch=%d rows=%s rejected=%d seconds=%.1f steps=%s",
            batch_id,
            self.last.rows,
            self.last.rejected,
            time.monotonic() - started,
            steps,
        )
        write_status(self._settings.checkpoint_path, self.last)
