"""The streaming query: Kafka (read_committed) → ``foreachBatch`` → Delta tables.

:func:`start` checks what must hold before a row is read (the topics regex, Kafka, the schema
registry's login, a checkpoint that belongs to the lakehouse) and starts the query, whose
``foreachBatch`` is :class:`~lakehouse_writer.stream.batch.BatchProcessor` (one micro-batch, as its
steps); :func:`run` drives it until it drains (``--once``), fails, or is asked to stop, and
leaves the status file saying which.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.checkpoint_guard import (
    check_checkpoint,
    check_lakehouse,
    concurrent_start,
)
from lakehouse_writer.engines import ids
from lakehouse_writer.read.decode import source_options
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.runtime.failure import report_failure, root_cause
from lakehouse_writer.runtime.probe import probe_kafka
from lakehouse_writer.runtime.session import require_classic
from lakehouse_writer.runtime.status import lag_of, record_lag, write_status
from lakehouse_writer.runtime.storage import CheckpointFiles
from lakehouse_writer.stream.batch import BatchProcessor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["BatchProcessor", "lag_of", "run", "start"]

log = logging.getLogger(__name__)

_STOP_WAIT_S = 60.0  # bound on waiting for Spark to record the last batch on a stop
ONCE_QUERIES = 3  # queries a run --once starts while rows stay held back (_held_at_end)


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
