"""FunctionRunner: the base class of every flow, and what a run of it does.

A flow implements ``initial_load`` and ``delta_load``; :meth:`FunctionRunner.run` does the
rest, the same for the Azure Functions trigger, the container server and the command line::

    enter the producer     transactional id per (function, dataflow, partition): a second
                           concurrent run fences the first, so only one can commit
    read the pointer       the latest ``_execution_log`` record of the key (read_committed)
    STARTED                its own small transaction
    the load               every ``producer.commit()`` also writes, inside that transaction,
                           the ``_lineage`` documents of the tables it carries and a
                           COMPLETED record with the staged pointer and rows so far
    FAILED | COMPLETED     on an exception: abort, FAILED with the pointer of the last commit;
                           a run that committed nothing gets its COMPLETED record on its own

With the OpenLineage client's variables set, the run also sends OpenLineage START, then
COMPLETE or FAIL (:mod:`producer_lib.runner.openlineage`, best effort, never failing it).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import json
import logging
import os
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from producer_lib.errors import ConfigError, ProduceError, ProducerLibError
from producer_lib.kafka.producer import KafkaProducer, PendingCommit
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC, LINEAGE_TOPIC
from producer_lib.runner.execution_log import (
    ExecutionRecord,
    LoadKind,
    RunStatus,
    log_key,
    read_latest,
)
from producer_lib.runner.lineage_records import lineage_documents, lineage_record
from producer_lib.runner.openlineage import OpenLineageRun
from producer_lib.runner.openlineage_model import (
    RunDatasets,
    RunFacts,
    kafka_namespace,
    source_naming,
)
from producer_lib.runner.result import RunFailed, RunResult
from producer_lib.runner.runs import azure_http
from producer_lib.settings import FlowSettings, KafkaSettings
from producer_lib.sources import DuckDBReader, SourceAdapter
from producer_lib.staging.expectations import merge_reports

__all__ = ["FunctionRunner", "RunFailed", "RunResult"]

log = logging.getLogger(__name__)

# What a caller may ask for: "auto" is the delta load, or the initial one without a pointer.
LoadRequest = Literal["initial", "delta", "auto"]

_FAILED_RECORD_PAUSE_S = 1.0  # between attempts at a FAILED record Kafka did not take

_current: contextvars.ContextVar[_Run] = contextvars.ContextVar("producer_lib_run")


@dataclass
class _Run:
    """State of one run (one per concurrent asyncio task, through a context variable)."""

    record: ExecutionRecord
    committed_pointer: Any
    staged_pointer: Any
    openlineage: OpenLineageRun
    reader: SourceAdapter | None = None
    rows: dict[str, int] = field(default_factory=dict)
    commit_ids: list[str] = field(default_factory=list)
    truncated: dict[str, dict[str, int]] = field(default_factory=dict)
    expectations: dict[str, Any] = field(default_factory=dict)
    clock: float = field(default_factory=time.monotonic)


class FunctionRunner:
    """Base class of a flow: implement :meth:`initial_load` and :meth:`delta_load`.

    Class attributes a flow may set (used when the runner builds its own producer and
    reader, i.e. for ``producer-lib run|serve`` and ``http(req)`` without them):
    ``source_system``, ``zone``, ``reader_class`` (a :class:`SourceAdapter` subclass, built
    with the logger) and ``function_name`` (default: the class's module name).
    ``lineage_namespace``: the OpenLineage namespace of the tables its SQL reads where the
    naming spec has none (DuckDB; default ``<dialect>://<source_system>``, docs/LINEAGE.md).

    Args:
        function_name: Name of the flow function: part of the transactional id and of the
            ``_execution_log`` key. Default: the class attribute, else the module name.
        logger: Where the runner and the flow log.
    """

    function_name: str = ""
    source_system: str = "UNKNOWN"
    zone: str = "bronze"
    reader_class: type[SourceAdapter] = DuckDBReader
    lineage_namespace: str = ""

    def __init__(self, function_name: str | None = None, logger: logging.Logger | None = None):
        name = function_name or type(self).function_name or type(self).__module__.split(".")[-1]
        if "|" in name or not name.strip():
            raise ConfigError("a function name must be non-empty and free of '|'", flow=name)
        self.function_name = name
        self.logger = logger or log

    # -- what a flow implements -----------------------------------------------------------

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """Load everything (typically TRUNCATE + REPLACE per table), then commit."""
        raise NotImplementedError(f"{type(self).__name__} does not implement initial_load")

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """Load what changed since :meth:`get_delta_pointer`, then commit."""
        raise NotImplementedError(f"{type(self).__name__} does not implement delta_load")

    # -- the delta pointer and the current run ---------------------------------------------

    def get_delta_pointer(self) -> Any:
        """The pointer of the last completed run of this (function, dataflow, partition).

        Read from ``_execution_log`` when the run started; None before the first one.
        """
        return self._run().committed_pointer

    def set_delta_pointer(self, value: Any) -> None:
        """Stage the pointer that the next ``producer.commit()`` of this run stores.

        Any JSON-serialisable value (a timestamp string, an id, a dict per table). It
        becomes visible with that commit's data, never without it.
        """
        json.dumps(value)  # fail here, in the flow, not inside the commit
        self._run().staged_pointer = value

    @property
    def dataflow(self) -> str:
        """The dataflow of the current run (``default`` unless the caller named one)."""
        return self._run().record.dataflow

    @property
    def partition(self) -> str:
        """The partition of the current run (``0`` unless the caller named one)."""
        return self._run().record.partition

    @property
    def run_id(self) -> str:
        """Id of the current run."""
        return self._run().record.run_id

    def _run(self) -> _Run:
        run = _current.get(None)
        if run is None:
            raise ProducerLibError(
                "no run in progress: this is only valid inside initial_load/delta_load",
                flow=self.function_name,
            )
        return run

    # -- building producer and reader -------------------------------------------------------

    def create_producer(self, settings: KafkaSettings | None = None) -> KafkaProducer:
        """A producer for this flow (not started; :meth:`run` picks its instance).

        Raises:
            ConfigError: ``KAFKA_*`` or ``FLOW_*`` settings are missing or invalid.
        """
        try:  # the settings' own errors name the variable and never show a value
            environment = FlowSettings().environment
            settings = settings or KafkaSettings.from_env()
        except ConfigError as exc:
            raise ConfigError(exc.message, **{**exc.context, "flow": self.function_name}) from None
        return KafkaProducer(
            self.source_system, self.function_name, self.zone, environment, settings, self.logger
        )

    def create_reader(self) -> SourceAdapter:
        """A reader for this flow: ``reader_class(logger)``."""
        return self.reader_class(self.logger)

    # -- triggers -------------------------------------------------------------------------

    async def http(
        self,
        req: Any,
        producer: KafkaProducer | None = None,
        reader: SourceAdapter | None = None,
    ) -> Any:
        """Serve an Azure Functions HTTP request (``azure.functions.HttpRequest``).

        Parameters ``load``, ``dataflow``, ``partition`` come from the query string or a
        JSON body; the answer is the run result as JSON with status 200, 400 (bad request),
        409 (a concurrent run took over), 500 (failed) or 503 (retry later); see
        :mod:`producer_lib.runner.triggers`. ``producer`` and ``reader`` as in :meth:`run`.
        """
        return await azure_http(self, req, producer, reader)

    # -- a run ----------------------------------------------------------------------------

    async def run(
        self,
        load: str,
        producer: KafkaProducer | None = None,
        reader: SourceAdapter | None = None,
        *,
        dataflow: str = "default",
        partition: str = "0",
    ) -> RunResult:
        """Run one load and log it on ``_execution_log``.

        Args:
            load: ``"initial"``, ``"delta"``, or ``"auto"``: the delta load, or the initial
                load while no delta pointer exists yet (what a request without ``load`` asks).
            producer: A producer; not yet started (the run starts it with the instance
                ``<dataflow>.<partition>`` and closes it) or already open (used as it is).
                Default: :meth:`create_producer`.
            reader: A reader, opened here unless already open. Default: :meth:`create_reader`.
            dataflow: Which dataflow of the function (own pointer, own fencing).
            partition: Which partition of the dataflow (own pointer, own fencing).

        Returns:
            What the run did.

        Raises:
            ConfigError: Bad arguments (nothing was started).
            RunFailed: The load failed; its FAILED record is logged (when Kafka allows).
        """
        load_kind = _check_run_args(self.function_name, load, dataflow, partition)
        producer = producer or self.create_producer()
        reader = reader or self.create_reader()
        async with AsyncExitStack() as stack:
            if not producer.is_open:
                producer.set_instance(f"{dataflow}.{partition}")
                stack.enter_context(producer)
            if not reader.is_open:
                await stack.enter_async_context(reader)
            return await self._run_load(load_kind, producer, reader, dataflow, partition)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_load(
        self,
        load: LoadRequest,
        producer: KafkaProducer,
        reader: SourceAdapter,
        dataflow: str,
        partition: str,
    ) -> RunResult:
        run = self._start(load, producer, reader, dataflow, partition)
        token = _current.set(run)
        hook = self._commit_hook(run, producer)
        producer.add_commit_hook(hook)
        try:
            try:
                await run.openlineage.start()
                initial = run.record.load == "initial"
                await (self.initial_load if initial else self.delta_load)(producer, reader)
            finally:  # the run's own records below commit without the hook
                producer.remove_commit_hook(hook)
            producer.check_usable()  # a produce error the load caught fails the run
            if producer.has_open_transaction:
                raise ProduceError(
                    "the load produced rows but did not commit them; call "
                    "producer.commit() at its end (they were aborted)"
                )
            merge_reports(run.expectations, producer.take_expectation_reports())
            if not run.commit_ids or run.staged_pointer != run.committed_pointer:
                self._log_record(producer, run, "COMPLETED", pointer=run.staged_pointer)
            result = self._result(run, "COMPLETED")
            await run.openlineage.complete()
            return result
        except Exception as exc:
            raise await self._failed(producer, run, exc) from exc
        finally:
            _current.reset(token)

    def _start(
        self,
        requested: LoadRequest,
        producer: KafkaProducer,
        reader: SourceAdapter,
        dataflow: str,
        partition: str,
    ) -> _Run:
        key = log_key(self.function_name, dataflow, partition)
        latest = read_latest(producer.settings, EXECUTION_LOG_TOPIC, key)
        pointer = latest.get("delta_pointer") if latest else None
        load: LoadKind = "initial" if requested == "initial" else "delta"
        if requested == "auto" and pointer is None:  # nothing yet for a delta to follow
            load = "initial"
        record = ExecutionRecord(
            run_id=str(uuid.uuid4()),
            function_name=self.function_name,
            dataflow=dataflow,
            partition=partition,
            status="STARTED",
            load=load,
            started_at=_now(),
            delta_pointer=pointer,
        )
        lineage = self._openlineage(record, producer, reader)
        run = _Run(record, pointer, pointer, lineage, reader=reader)
        self._log_record(producer, run, "STARTED", pointer=pointer)
        self.logger.info(
            "run started flow=%s dataflow=%s partition=%s load=%s run_id=%s delta_pointer=%r",
            self.function_name,
            dataflow,
            partition,
            load,
            record.run_id,
            pointer,
        )
        return run

    def _openlineage(
        self, record: ExecutionRecord, producer: KafkaProducer, reader: SourceAdapter
    ) -> OpenLineageRun:
        """The run's OpenLineage events (none while OpenLineage is off).

        Job ``<function>`` (``<function>.<dataflow>`` for a dataflow other than ``default``)
        in the namespace ``OPENLINEAGE_NAMESPACE``, else the flow's source system.
        """
        dataflow = "" if record.dataflow == "default" else f".{record.dataflow}"
        facts = RunFacts(
            run_id=record.run_id,
            job_namespace=os.environ.get("OPENLINEAGE_NAMESPACE") or self.source_system,
            job_name=f"{self.function_name}{dataflow}",
            function_name=self.function_name,
            dataflow=record.dataflow,
            partition=record.partition,
            load=record.load,
            source_system=self.source_system,
        )
        naming = source_naming(reader, self.source_system, self.lineage_namespace)
        datasets = RunDatasets(kafka_namespace(producer.settings.bootstrap_servers), naming)
        return OpenLineageRun.create(facts, datasets, self.logger)

    def _commit_hook(self, run: _Run, producer: KafkaProducer) -> Any:
        """Inside each commit: lineage and COMPLETED; after it succeeded: the bookkeeping."""

        def hook(pending: PendingCommit) -> None:
            merge_reports(run.expectations, producer.take_expectation_reports())
            rows = {t: run.rows.get(t, 0) + n for t, n in pending.rows.items()}
            documents = lineage_documents(run.reader, pending, self.logger)
            for document in documents:
                producer.produce_system_record(LINEAGE_TOPIC, *lineage_record(document))
            record = replace(
                self._record(
                    run, "COMPLETED", pointer=run.staged_pointer, commit_id=pending.commit_id
                ),
                rows={**run.rows, **rows},
            )
            producer.produce_system_record(EXECUTION_LOG_TOPIC, *record.encode())
            pointer = run.staged_pointer
            pending.after_commit(lambda: _committed(run, rows, pending, pointer, documents))

        return hook

    def _record(
        self, run: _Run, status: RunStatus, *, pointer: Any, **extra: Any
    ) -> ExecutionRecord:
        finished = None if status == "STARTED" else _now()
        commit_id = run.commit_ids[-1] if run.commit_ids else None
        fields = {"commit_id": commit_id, **extra}
        return replace(
            run.record,
            status=status,
            finished_at=finished,
            rows=dict(run.rows),
            delta_pointer=pointer,
            expectations=copy.deepcopy(run.expectations),
            **fields,
        )

    def _log_record(self, producer: KafkaProducer, run: _Run, status: RunStatus, **kw: Any) -> None:
        """Write one execution-log record in its own transaction."""
        record = self._record(run, status, **kw)
        producer.produce_system_record(EXECUTION_LOG_TOPIC, *record.encode())
        producer.commit()
        if status == "COMPLETED":
            run.committed_pointer = kw["pointer"]

    async def _failed(self, producer: KafkaProducer, run: _Run, exc: BaseException) -> RunFailed:
        error = f"{type(exc).__name__}: {exc}"
        self.logger.error(
            "run failed flow=%s dataflow=%s partition=%s run_id=%s error=%s",
            self.function_name,
            run.record.dataflow,
            run.record.partition,
            run.record.run_id,
            error,
        )
        merge_reports(run.expectations, producer.take_expectation_reports())
        await self._log_failed(producer, run, error)
        await run.openlineage.fail(error)
        result = self._result(run, "FAILED", error=error)
        return RunFailed(
            f"run failed: {error}",
            result,
            flow=self.function_name,
            dataflow=run.record.dataflow,
            partition=run.record.partition,
            run_id=run.record.run_id,
        )

    async def _log_failed(self, producer: KafkaProducer, run: _Run, error: str) -> None:
        """Abort, then write the FAILED record; retried for ``connect_timeout_s`` more.

        The error that failed the run is often Kafka being away (a delivery timeout): the
        first attempt then fails too, while a broker that is back a few seconds later takes
        the record. Fenced or broken producers are not retried: that record cannot go,
        except after a transaction timeout, which fenced nobody: a successor writes it.
        """
        if producer.timed_out:
            with producer.successor() as successor:
                return await self._log_failed(successor, run, error)
        deadline = time.monotonic() + producer.settings.connect_timeout_s
        while True:
            try:
                producer.abort()
                self._log_record(
                    producer, run, "FAILED", pointer=run.committed_pointer, error=error
                )
                return
            except ProducerLibError as log_exc:
                if time.monotonic() >= deadline or not producer.is_open:
                    self.logger.error(
                        "FAILED record not written flow=%s run_id=%s error=%s",
                        self.function_name,
                        run.record.run_id,
                        log_exc,
                    )
                    return
                self.logger.warning(
                    "FAILED record not written yet, retrying flow=%s run_id=%s error=%s",
                    self.function_name,
                    run.record.run_id,
                    log_exc,
                )
                await asyncio.sleep(_FAILED_RECORD_PAUSE_S)

    def _result(self, run: _Run, status: str, error: str | None = None) -> RunResult:
        record = run.record
        duration = round(time.monotonic() - run.clock, 3)
        result = RunResult(
            run_id=record.run_id,
            function_name=self.function_name,
            dataflow=record.dataflow,
            partition=record.partition,
            load=record.load,
            status=status,
            rows=dict(run.rows),
            duration_s=duration,
            commit_id=run.commit_ids[-1] if run.commit_ids else None,
            commit_ids=tuple(run.commit_ids),
            delta_pointer=run.committed_pointer,
            error=error,
            truncated={table: dict(columns) for table, columns in run.truncated.items()},
            expectations=copy.deepcopy(run.expectations),
        )
        if status == "COMPLETED":
            self.logger.info(
                "run completed flow=%s run_id=%s rows=%s duration_s=%.3f delta_pointer=%r",
                self.function_name,
                record.run_id,
                run.rows,
                duration,
                run.committed_pointer,
            )
        return result


def _committed(
    run: _Run,
    rows: dict[str, int],
    pending: PendingCommit,
    pointer: Any,
    documents: list[dict[str, Any]],
) -> None:
    run.rows.update(rows)
    run.openlineage.committed(documents, pending.topic_rows)
    run.commit_ids.append(pending.commit_id)
    run.committed_pointer = pointer
    for table, columns in pending.truncated.items():
        counts = run.truncated.setdefault(table, {})
        for column, count in columns.items():
            counts[column] = counts.get(column, 0) + count


def _check_run_args(function_name: str, load: str, dataflow: str, partition: str) -> LoadRequest:
    if load not in get_args(LoadRequest):
        raise ConfigError(
            f"load must be one of {', '.join(get_args(LoadRequest))}, not {load!r}",
            flow=function_name,
        )
    for name, value in (("dataflow", dataflow), ("partition", partition)):
        if not value or "|" in value or len(value) > 200:
            raise ConfigError(
                f"{name} must be 1-200 characters without '|'", flow=function_name, **{name: value}
            )
    return load  # type: ignore[return-value]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
