"""OpenLineage run events of a writer run: topics in, Delta tables out.

Off by default, on with the OpenLineage client's own variables, as for flows
(``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, ``OPENLINEAGE__...``; docs/LINEAGE.md). One
``lakehouse-writer run`` is one OpenLineage run of the job ``lakehouse-writer.<instance>``
(namespace ``OPENLINEAGE_NAMESPACE``, else ``lakehouse-writer``):

- START when the run begins;
- RUNNING after each batch that applied rows: the topics the writer reads as inputs (named as
  the flows name their outputs, ``kafka://<host:port>`` + topic, so the graph joins), the
  tables the batch changed as outputs (the naming spec's ``file`` + path, or
  ``abfss://<container>@<account>...`` + path), each with the batch's row count;
- COMPLETE when it ends drained or stopped, FAIL (with the error) when it fails, each with
  every table the run changed.

It watches the writer as the metrics do (:class:`~lakehouse_writer.runtime.status.StatusObserver`):
the batch path knows nothing of it. Events go out on a thread of their own, so a slow backend
never holds a batch; the last event is awaited a bounded time. A failure to send is a warning,
never the writer's failure.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from lakehouse_writer.runtime.status import BatchStats
from lakehouse_writer.settings import LakehouseSettings
from producer_lib.runner.openlineage import enabled
from producer_lib.runner.openlineage_model import Dataset, file_dataset, kafka_namespace

__all__ = ["WriterLineage", "writer_lineage"]

log = logging.getLogger(__name__)

JOB_NAMESPACE = "lakehouse-writer"
_FLUSH_S = 30.0  # how long the end of a run waits for its events to be sent


def writer_lineage(
    settings: LakehouseSettings, instance: Callable[[], str]
) -> WriterLineage | None:
    """The run's OpenLineage events when the client's variables ask for them, else None.

    ``instance`` gives the writer instance id (the job's name); asked only when events are on.
    """
    if not enabled():
        return None
    try:
        from producer_lib.runner.openlineage_events import client_sender

        client = client_sender().client
    except Exception as exc:  # noqa: BLE001 - lineage never stops the writer
        log.warning("OpenLineage is configured but cannot send (%s); no events", exc)
        return None
    lineage = WriterLineage(settings, instance(), client.emit)
    lineage.start()
    return lineage


class WriterLineage:
    """Sends the events of one writer run through ``emit`` (the client's)."""

    def __init__(self, settings: LakehouseSettings, instance: str, emit: Any) -> None:
        self.run_id = str(uuid.uuid4())
        self.job_namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or JOB_NAMESPACE
        self.job_name = f"lakehouse-writer.{instance}"
        self._kafka = kafka_namespace(settings.kafka_bootstrap_servers)
        self._lakehouse = settings.lakehouse_path.rstrip("/")
        self._emit = emit
        self._topics: set[str] = set()
        self._tables: dict[str, int] = {}  # rows per table over the run
        self._last_batch = -1
        self._ended = False
        self._sending = ThreadPoolExecutor(1, thread_name_prefix="openlineage")
        self._sent: list[Future[None]] = []

    def table_dataset(self, table: str) -> Dataset:
        """``NS.T`` as the dataset of its Delta table (``<lakehouse>/NS/T``)."""
        return file_dataset(f"{self._lakehouse}/{table.replace('.', '/', 1)}")

    def start(self) -> None:
        """START: the run began."""
        self._send("START", {}, None)

    def on_status(self, stats: BatchStats) -> None:
        """RUNNING after a batch that applied rows; COMPLETE or FAIL when the run ends."""
        self._topics.update(stats.lag)
        if self._ended:
            return
        if stats.state == "running":
            if stats.batch_id > self._last_batch and stats.rows:
                self._last_batch = stats.batch_id
                for table, rows in stats.rows.items():
                    self._tables[table] = self._tables.get(table, 0) + rows
                self._send("RUNNING", dict(stats.rows), None)
            return
        self._ended = True
        failed = stats.state == "failed"
        self._send("FAIL" if failed else "COMPLETE", dict(self._tables), stats.error or None)
        self._flush()

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Spark's report of a batch: nothing here needs it."""

    def _send(self, kind: str, rows: Mapping[str, int], error: str | None) -> None:
        event = self._event(kind, rows, error)
        self._sent.append(self._sending.submit(self._emit_or_warn, kind, event))

    def _emit_or_warn(self, kind: str, event: Any) -> None:
        try:
            self._emit(event)
        except Exception as exc:  # noqa: BLE001 - lineage never stops the writer
            log.warning(
                "OpenLineage %s event failed, the writer goes on job=%s run_id=%s error=%s: %s",
                kind,
                self.job_name,
                self.run_id,
                type(exc).__name__,
                exc,
            )

    def _flush(self) -> None:
        for future in self._sent:
            try:
                future.result(timeout=_FLUSH_S)
            except Exception:  # noqa: BLE001, S110 - a timeout: the event is given up
                pass
        self._sending.shutdown(wait=False)

    def _event(self, kind: str, rows: Mapping[str, int], error: str | None) -> Any:
        from openlineage.client.event_v2 import (
            InputDataset,
            Job,
            OutputDataset,
            Run,
            RunEvent,
            RunState,
        )
        from openlineage.client.facet_v2 import (
            error_message_run,
            job_type_job,
            output_statistics_output_dataset,
        )

        from producer_lib.runner.openlineage_events import producer_uri

        producer = producer_uri()
        run_facets: dict[str, Any] = {}
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=error, programmingLanguage="PYTHON", producer=producer
            )
        job_type = job_type_job.JobTypeJobFacet(
            processingType="STREAMING",
            integration="FLOW_PLATFORM",
            jobType="LAKEHOUSE_WRITER",
            producer=producer,
        )
        outputs = []
        for table, count in sorted(rows.items()):
            dataset = self.table_dataset(table)
            statistics = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=count, producer=producer
            )
            outputs.append(
                OutputDataset(
                    dataset.namespace,
                    dataset.name,
                    outputFacets={"outputStatistics": statistics},
                )
            )
        inputs = [InputDataset(self._kafka, topic) for topic in sorted(self._topics)]
        return RunEvent(
            eventType=getattr(RunState, kind),
            eventTime=datetime.now(UTC).isoformat(timespec="milliseconds"),
            run=Run(runId=self.run_id, facets=run_facets),
            job=Job(namespace=self.job_namespace, name=self.job_name, facets={"jobType": job_type}),
            producer=producer,
            inputs=inputs if kind != "START" else [],
            outputs=outputs,
        )
