"""The streaming query: Kafka (read_committed) → foreachBatch → Delta tables.

:class:`BatchProcessor` is what ``foreachBatch`` calls: it splits off the system topics,
decodes the data rows (:mod:`lakehouse_writer.read`), applies them table by table
(:mod:`lakehouse_writer.apply`), appends ``_rejected`` and the system tables, and writes a
status file. Every write is idempotent per batch id, so a replay after a crash is harmless.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse_writer import txn
from lakehouse_writer.apply import ApplyResult, apply_batch
from lakehouse_writer.catalog import SchemaCatalog
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read import decode_batch
from lakehouse_writer.system_tables import (
    REJECTED,
    append_system,
    commit_rows,
    json_rows,
    rejected_rows,
)
from lakehouse_writer.tables import TableManager
from lakehouse_writer.truncate import TRUNCATE_LOG_SCHEMA, TruncateLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse_writer.settings import LakehouseSettings

log = logging.getLogger(__name__)

STATUS_FILE = "writer_status.json"
TRUNCATES = "_truncates"
_EXECUTION_LOG_FIELDS = ("run_id", "function_name", "dataflow", "status", "load", "commit_id")
_LINEAGE_FIELDS = ("target", "commit_id")
_SOURCE_DEFAULTS = {
    "startingOffsets": "earliest",
    "kafka.isolation.level": "read_committed",  # never apply rows of open/aborted transactions
    "failOnDataLoss": "true",  # a lost offset range must stop the writer, not skip rows
    "includeHeaders": "false",
}


@dataclass
class BatchStats:
    """What the last batch did (for the log line and the status file)."""

    batch_id: int = -1
    rows: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    lag_batch_id: int = -1
    finished_at: str = ""


class BatchProcessor:
    """The ``foreachBatch`` function of the writer.

    Args:
        spark: The session.
        settings: Where to read and write.
        instance_id: The writer instance id of the checkpoint (Delta txnAppId).
    """

    def __init__(self, spark: SparkSession, settings: LakehouseSettings, instance_id: str) -> None:
        self._spark = spark
        self._settings = settings
        self._instance = instance_id
        self._lake = settings.lakehouse_path.rstrip("/")
        self._tables = TableManager(spark, self._lake)
        self._catalog = SchemaCatalog(settings.kafka_client_conf(), settings.schemas_topic,
                                      settings.schema_registry_url)  # fmt: skip
        self._stopped: set[str] = set()
        self._persisted: list[DataFrame] = []
        self._truncates = TruncateLog(spark, f"{self._lake}/{TRUNCATES}")
        self._new_truncates: list[tuple[str, int, str]] = []
        self.last = BatchStats()

    @property
    def _system_topics(self) -> dict[str, str]:
        s = self._settings
        return {s.commits_topic: "_commits", s.execution_log_topic: "_execution_log",
                s.lineage_topic: "_lineage"}  # fmt: skip

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Apply one micro-batch."""
        from pyspark.sql import functions as F

        started = time.monotonic()
        df = df.persist()
        try:
            system = list(self._system_topics) + [self._settings.schemas_topic]
            data = df.filter(~F.col("topic").isin(*system))
            results, rejected = self._apply_data(data, batch_id)
            self._write_rejected(rejected, batch_id)
            self._write_truncates(batch_id)
            self._write_system(df, batch_id, results)
            self._finish(batch_id, results, started)
        finally:
            for frame in self._persisted:
                frame.unpersist()
            self._persisted.clear()
            df.unpersist()

    def _apply_data(
        self, data: DataFrame, batch_id: int
    ) -> tuple[list[ApplyResult], list[DataFrame]]:
        decoded = decode_batch(data, self._catalog, self._tables, self._stopped)
        results: list[ApplyResult] = []
        rejected = list(decoded.rejected)
        for ref, (info, rows) in decoded.tables.items():
            rows = rows.persist()  # decoded once, read by every step of the apply
            try:
                applied = self._truncates.of(ref.qualified)
                result = apply_batch(rows, batch_id, info, self._instance, applied)
            except LakehouseWriterError as exc:
                log.error("apply failed table=%s batch=%d error=%s", ref.qualified, batch_id, exc)
                rejected.append(rejected_rows(rows, str(exc), ref.qualified))
                continue
            finally:
                self._persisted.append(rows)
            results.append(result)
            self._new_truncates += self._truncates.record(result.table, result.truncates)
            if result.rejected is not None:
                rejected.append(result.rejected)
        return results, rejected

    def _write_rejected(self, rejected: list[DataFrame], batch_id: int) -> None:
        union = reduce(lambda a, b: a.unionByName(b), rejected) if rejected else None
        if union is None:
            self.last.rejected = 0
            return
        union = union.persist()
        self.last.rejected = union.count()
        if self.last.rejected:
            append_system(union, f"{self._lake}/{REJECTED}", self._instance, batch_id)
            log.warning("rows rejected batch=%d rows=%d table=%s", batch_id, self.last.rejected,
                        REJECTED)  # fmt: skip
        union.unpersist()

    def _write_truncates(self, batch_id: int) -> None:
        if self._new_truncates:
            frame = self._spark.createDataFrame(self._new_truncates, TRUNCATE_LOG_SCHEMA)
            append_system(frame, f"{self._lake}/{TRUNCATES}", self._instance, batch_id)
            self._new_truncates = []

    def _write_system(self, df: DataFrame, batch_id: int, results: list[ApplyResult]) -> None:
        from pyspark.sql import functions as F

        versions = {r.table: r.version for r in results}
        for topic, table in self._system_topics.items():
            rows = df.filter(F.col("topic") == topic)
            if rows.isEmpty():
                continue
            if table == "_commits":
                frame = commit_rows(rows, versions)
            else:
                fields = _EXECUTION_LOG_FIELDS if table == "_execution_log" else _LINEAGE_FIELDS
                frame = json_rows(rows, fields)
            append_system(frame, f"{self._lake}/{table}", self._instance, batch_id)

    def _finish(self, batch_id: int, results: list[ApplyResult], started: float) -> None:
        self.last.batch_id = batch_id
        self.last.rows = {r.table: sum(r.rows.values()) for r in results}
        self.last.finished_at = datetime.now(UTC).isoformat()
        log.info("batch done batch=%d rows=%s rejected=%d seconds=%.1f", batch_id,
                 self.last.rows, self.last.rejected, time.monotonic() - started)  # fmt: skip
        write_status(self._settings.checkpoint_path, self.last)


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
    data = json.loads(raw) if isinstance(raw, str) else (raw or {})
    return {(t, p): int(o) for t, parts in data.items() for p, o in parts.items()}


def write_status(checkpoint: str, stats: BatchStats) -> None:
    """Write the status JSON file into the checkpoint directory (atomically)."""
    directory = Path(checkpoint.removeprefix("file:"))
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{STATUS_FILE}.tmp"
    tmp.write_text(json.dumps({
        "last_batch_id": stats.batch_id, "last_batch_time": stats.finished_at,
        "rows_applied": stats.rows, "rows_rejected": stats.rejected, "lag": stats.lag,
        "lag_batch_id": stats.lag_batch_id,
    }, indent=2))  # fmt: skip
    tmp.replace(directory / STATUS_FILE)


def _record_lag(query: StreamingQuery, processor: BatchProcessor, checkpoint: str) -> None:
    progress = query.lastProgress
    if not progress or progress.get("batchId", -1) == processor.last.lag_batch_id:
        return
    processor.last.lag = lag_of(progress)
    processor.last.lag_batch_id = int(progress["batchId"])
    log.info("progress batch=%d lag=%s rows_per_s=%s", processor.last.lag_batch_id,
             processor.last.lag, progress.get("processedRowsPerSecond"))  # fmt: skip
    write_status(checkpoint, processor.last)


def start(
    spark: SparkSession, settings: LakehouseSettings, once: bool
) -> tuple[StreamingQuery, BatchProcessor]:
    """Start the streaming query (``once``: drain what is there with availableNow)."""
    options: dict[str, Any] = dict(_SOURCE_DEFAULTS)
    options.update(settings.spark_kafka_options())
    options["subscribePattern"] = settings.topics_regex
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    processor = BatchProcessor(spark, settings, txn.instance_id(settings.checkpoint_path))
    writer = (
        spark.readStream.format("kafka").options(**options).load()
        .writeStream.foreachBatch(processor)
        .option("checkpointLocation", settings.checkpoint_path)
        .queryName("lakehouse-writer")
    )  # fmt: skip
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_s} seconds")
    log.info("writer started topics=%s lakehouse=%s checkpoint=%s once=%s",
             settings.topics_regex, settings.lakehouse_path, settings.checkpoint_path,
             once)  # fmt: skip
    return writer.start(), processor


def run(
    spark: SparkSession, settings: LakehouseSettings, once: bool,
    stop: threading.Event | None = None,
) -> None:  # fmt: skip
    """Run the writer until it drains (``once``), fails, or ``stop`` is set.

    On ``stop`` the query is stopped between batches (when no trigger is active).

    Raises:
        pyspark.errors.StreamingQueryException: The query failed.
    """
    query, processor = start(spark, settings, once)
    stop = stop or threading.Event()
    while not query.awaitTermination(1):
        _record_lag(query, processor, settings.checkpoint_path)
        if stop.is_set() and not query.status.get("isTriggerActive", False):
            log.info("stop requested; stopping between batches")
            query.stop()
            break
    _record_lag(query, processor, settings.checkpoint_path)
    exc = query.exception()
    if exc is not None:
        raise exc
