"""One contract for every way a run is triggered: Azure Functions HTTP, container, CLI.

Parameters come from the query string or a JSON body (the body wins): ``load``
(``initial`` | ``delta`` | ``auto``; default ``auto``: a route that passes none, like the
documentation's ``@app.route(route="LABWARE/run")``, runs the delta load, or the initial load
while no delta pointer exists yet), ``dataflow`` (default ``default``),
``partition`` (default ``0``). The answer is the run's
:class:`~producer_lib.runner.result.RunResult` as JSON, with a status code that says what
happened:

=====  ======================================================================
200    the run completed
202    the run goes on after ``FLOW_HTTP_WAIT_S`` (default 200 s; Azure cuts an HTTP
       response at 230 s): the body has ``run_id``, ``status: RUNNING`` and
       ``status_url`` (also the ``Location`` header); poll ``GET runs/{run_id}``
       (:mod:`producer_lib.runner.runs`)
400    bad parameters (nothing ran)
409    another run of the same function, dataflow and partition is in progress (here:
       refused, with its ``status_url``) or took over
500    the run failed (the error is in the body and on ``_execution_log``)
503    Kafka or the source could not be reached in time; retry later
=====  ======================================================================
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from producer_lib.errors import ConfigError, ProducerLibError, Transient
from producer_lib.kafka.transactions import TransactionFailed
from producer_lib.runner.result import RunFailed, RunResult

if TYPE_CHECKING:
    from producer_lib.kafka.producer import KafkaProducer
    from producer_lib.sources import SourceAdapter

__all__ = ["RunRequest", "Runnable", "parse_run_request", "response_for", "status_for"]


class Runnable(Protocol):
    """What a trigger needs of a flow's runner; :class:`~producer_lib.runner.FunctionRunner` is one.

    The triggers (this module, :mod:`producer_lib.runner.runs`, ``producer-lib serve``) drive
    a runner through these names only, so they never import the runner's module, which
    serves ``FunctionRunner.http`` with them.
    """

    function_name: str
    logger: logging.Logger

    @property
    def run_id(self) -> str:
        """Id of the run in progress in the caller's context."""
        ...

    async def run(
        self,
        load: str,
        producer: KafkaProducer | None = None,
        reader: SourceAdapter | None = None,
        *,
        dataflow: str = "default",
        partition: str = "0",
    ) -> RunResult:
        """Run one load and log it (see :meth:`FunctionRunner.run`)."""
        ...


_PARAMS = ("load", "dataflow", "partition")


@dataclass(frozen=True)
class RunRequest:
    """What to run."""

    load: str = "auto"
    dataflow: str = "default"
    partition: str = "0"


def parse_run_request(
    flow: str, query: Mapping[str, str], body: Mapping[str, Any] | None = None
) -> RunRequest:
    """The run a request asks for, from its query string and optional JSON body.

    Without ``load`` the request asks for ``auto``: the delta load, or the initial load while
    no delta pointer exists yet.

    Raises:
        ConfigError: A parameter of the wrong shape or an unknown one (HTTP 400).
    """
    if body is not None and not isinstance(body, Mapping):
        raise ConfigError("the JSON body must be an object", flow=flow)
    merged = {k: v for k, v in query.items() if k in _PARAMS}
    merged.update({k: v for k, v in (body or {}).items() if k in _PARAMS})
    unknown = sorted(set(body or {}) - set(_PARAMS))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown}; expected {list(_PARAMS)}", flow=flow)
    values = {k: str(v) for k, v in merged.items() if v is not None and not isinstance(v, dict)}
    if len(values) != len(merged):
        raise ConfigError("parameters must be strings or numbers", flow=flow)
    return RunRequest(**values)


def status_for(error: BaseException) -> int:
    """The HTTP status code of a failed run (see the module docstring)."""
    chain = list(_causes(error))
    if any(isinstance(e, TransactionFailed) and e.fenced for e in chain):
        return 409
    if isinstance(error, ConfigError):
        return 400
    if any(isinstance(e, Transient) for e in chain):
        return 503
    return 500


def _causes(error: BaseException) -> Any:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def response_for(
    runner: Runnable, outcome: RunResult | BaseException
) -> tuple[int, dict[str, Any]]:
    """Status code and JSON body for a result or an error."""
    if isinstance(outcome, RunFailed):
        return status_for(outcome), outcome.result.to_json()
    if isinstance(outcome, BaseException):
        body = {"function_name": runner.function_name, "status": "REJECTED", "error": str(outcome)}
        return status_for(outcome), body
    return 200, outcome.to_json()


async def execute(
    runner: Runnable,
    request: RunRequest,
    producer: KafkaProducer | None = None,
    reader: SourceAdapter | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run ``request`` and return its status code and body (never raises a run error)."""
    try:
        result = await runner.run(
            request.load, producer, reader, dataflow=request.dataflow, partition=request.partition
        )
    except ProducerLibError as exc:
        return response_for(runner, exc)
    return response_for(runner, result)
