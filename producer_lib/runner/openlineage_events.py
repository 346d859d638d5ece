"""OpenLineage run events of a flow run, built and sent with the official client.

Imported only when OpenLineage is on (:mod:`producer_lib.runner.openlineage`): it needs
``openlineage-python``, the ``lineage`` extra. :func:`run_event` is pure; :func:`client_sender`
builds the client from its own configuration (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``,
``OPENLINEAGE__TRANSPORT__...``), whichever transport that names: HTTP, console, file, Kafka.
"""

from __future__ import annotations

import atexit
import os
import threading
from datetime import UTC, datetime

from openlineage.client import OpenLineageClient
from openlineage.client import __version__ as client_version
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    JobFacet,
    OutputDatasetFacet,
    RunFacet,
    column_lineage_dataset,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    processing_engine_run,
    schema_dataset,
    tags_run,
)

from producer_lib._version import installed_version
from producer_lib.runner.openlineage_model import (
    ColumnInput,
    EventType,
    OutputLineage,
    RunDatasets,
    RunFacts,
)

__all__ = ["ClientSender", "client_sender", "producer_uri", "run_event"]

INTEGRATION = "FLOW_PLATFORM"
_STATES = {"START": RunState.START, "COMPLETE": RunState.COMPLETE, "FAIL": RunState.FAIL}


def producer_uri() -> str:
    """The ``producer`` of every event and facet: this library and its version, as a URN."""
    return f"urn:flow-platform:producer_lib:{installed_version()}"


def run_event(
    event_type: EventType,
    facts: RunFacts,
    datasets: RunDatasets,
    *,
    error: str | None = None,
    event_time: datetime | None = None,
) -> RunEvent:
    """The RunEvent of ``facts``'s run.

    START carries no datasets (nothing is read yet); COMPLETE and FAIL carry the inputs and
    the outputs, with their column lineage, of the run's commits so far.
    """
    producer = producer_uri()
    run_facets: dict[str, RunFacet] = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=installed_version(),
            name="flow-platform",
            openlineageAdapterVersion=client_version,
            producer=producer,
        ),
        "tags": tags_run.TagsRunFacet(
            tags=[
                tags_run.TagsRunFacetFields(key, value, INTEGRATION)
                for key, value in (
                    ("function_name", facts.function_name),
                    ("dataflow", facts.dataflow),
                    ("partition", facts.partition),
                    ("load", facts.load),
                    ("source_system", facts.source_system),
                )
            ],
            producer=producer,
        ),
    }
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="PYTHON", producer=producer
        )
    job_facets: dict[str, JobFacet] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration=INTEGRATION, jobType="FLOW", producer=producer
        )
    }
    with_datasets = event_type != "START"
    inputs = [InputDataset(d.namespace, d.name) for d in datasets.inputs()] if with_datasets else []
    outputs = [_output(o, producer) for o in datasets.outputs()] if with_datasets else []
    when = event_time or datetime.now(UTC)
    return RunEvent(
        eventType=_STATES[event_type],
        eventTime=when.isoformat(timespec="milliseconds"),
        run=Run(runId=facts.run_id, facets=run_facets),
        job=Job(namespace=facts.job_namespace, name=facts.job_name, facets=job_facets),
        producer=producer,
        inputs=inputs,
        outputs=outputs,
    )


def _output(output: OutputLineage, producer: str) -> OutputDataset:
    facets: dict[str, DatasetFacet] = {}
    if output.columns:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[
                schema_dataset.SchemaDatasetFacetFields(name=name, ordinal_position=position)
                for position, name in enumerate(output.columns, start=1)
            ],
            producer=producer,
        )
        facets["columnLineage"] = column_lineage_dataset.ColumnLineageDatasetFacet(
            fields={
                target: column_lineage_dataset.Fields(
                    inputFields=[_input_field(column) for column in inputs]
                )
                for target, inputs in output.columns.items()
            },
            producer=producer,
        )
    statistics: dict[str, OutputDatasetFacet] = {
        "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=output.rows, producer=producer
        )
    }
    return OutputDataset(
        output.dataset.namespace, output.dataset.name, facets=facets, outputFacets=statistics
    )


def _input_field(column: ColumnInput) -> column_lineage_dataset.InputField:
    copy = column.kind == "copy"
    transformation = column_lineage_dataset.Transformation(
        type="DIRECT",
        subtype="IDENTITY" if copy else "TRANSFORMATION",
        description=None if copy else column.expression,
        masking=False,
    )
    return column_lineage_dataset.InputField(
        column.dataset.namespace,
        column.dataset.name,
        column.field,
        transformations=[transformation],
    )


class ClientSender:
    """Sends run events through one OpenLineage client (its configured transport)."""

    def __init__(self, client: OpenLineageClient) -> None:
        self.client = client

    def send(
        self, event_type: EventType, facts: RunFacts, datasets: RunDatasets, error: str | None
    ) -> None:
        """Build and emit one event; the transport's errors propagate to the caller."""
        self.client.emit(run_event(event_type, facts, datasets, error=error))


_senders: dict[tuple[tuple[str, str], ...], ClientSender] = {}
_senders_lock = threading.Lock()


def close_senders(timeout_s: float = 5.0) -> None:
    """Close every client made so far: their transports flush and let their connections go.

    Registered to run at exit; tests call it when the broker or receiver they used stops (a
    Kafka transport's producer would otherwise retry a stopped broker until the process ends).
    """
    with _senders_lock:
        senders = list(_senders.values())
        _senders.clear()
    for sender in senders:
        try:
            sender.client.close(timeout_s)
        except Exception:  # noqa: BLE001, S110 - closing is best effort, like every send
            pass


atexit.register(close_senders)


def client_sender() -> ClientSender:
    """A sender with the client the ``OPENLINEAGE*`` variables configure (one per config)."""
    config = _openlineage_environment()
    with _senders_lock:
        sender = _senders.get(config)
        if sender is None:
            sender = _senders[config] = ClientSender(_new_client(config))
        return sender


def _openlineage_environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OPENLINEAGE")))


def _new_client(config: tuple[tuple[str, str], ...]) -> OpenLineageClient:
    """The client, leaving the environment as it found it.

    The client copies ``OPENLINEAGE_URL`` into ``OPENLINEAGE__TRANSPORT__TRANSPORTS__...``
    variables of the process while it resolves its transport (it reads them only then): left
    there, they would keep OpenLineage on after ``OPENLINEAGE_URL`` is unset.
    """
    try:
        return OpenLineageClient()
    finally:
        before = dict(config)
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE") and k not in before]:
            del os.environ[key]
