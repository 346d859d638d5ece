"""Runs that outlive their HTTP request: answer 202, go on, and answer ``GET /runs/{id}``.

Azure Functions cut an HTTP response at 230 s, whatever ``functionTimeout`` says. So an HTTP
trigger (:func:`azure_http`, ``producer-lib serve``) starts the
run as an asyncio task and waits for it up to ``FLOW_HTTP_WAIT_S`` seconds (default 200):

- done in time: the answer is the run's result, as before (200, 500, ...);
- not done: ``202`` with ``{"run_id", "status": "RUNNING", "status_url", ...}`` and a
  ``Location`` header; the run goes on in this process.

``GET <status_url>`` (route ``runs/{run_id}`` next to the ``run`` route, e.g. ``/api/run`` ->
``/api/runs/<id>``) answers the run's state: from this process's registry while it ran the run
(``RUNNING``, then ``COMPLETED``/``FAILED`` with the run result), else from the run's last
record on ``_execution_log`` (``STARTED``, ``COMPLETED``, ``FAILED``; the status URL's query
names ``function``, ``dataflow`` and ``partition``, the record's key), else 404.

A caller's ``with KafkaProducer(...)`` and ``async with Reader(...)`` blocks end when the 202
is returned, while the run still uses both. A run that answers 202 therefore *holds* the
producer and the reader it was given (:meth:`KafkaProducer.hold`, :meth:`SourceAdapter.hold`):
leaving those blocks does not close them; the close runs once, when the run ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from producer_lib.errors import ConfigError, ProduceError, ProducerLibError
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from producer_lib.runner.execution_log import log_key, read_latest
from producer_lib.runner.triggers import (
    Runnable,
    RunRequest,
    execute,
    parse_run_request,
    response_for,
)
from producer_lib.settings import KafkaSettings, TriggerSettings

if TYPE_CHECKING:
    import azure.functions as func

    from producer_lib.kafka.producer import KafkaProducer
    from producer_lib.sources import SourceAdapter

__all__ = [
    "REGISTRY",
    "Answer",
    "RunRegistry",
    "TrackedRun",
    "answer_run",
    "azure_run_status",
    "http_wait_s",
    "read_run_record",
    "run_status",
    "status_url",
    "valid_run_id",
]

_STEP_S = 0.05  # how often a run that has no id yet is looked at
_KEEP_FINISHED = 500  # finished runs the registry remembers (the oldest are forgotten)

# what the runner makes (str(uuid4())): a run id of any other shape is malformed, never looked up
_RUN_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# status code, JSON body, extra headers
Answer = tuple[int, dict[str, Any], dict[str, str]]


def http_wait_s() -> float:
    """How long an HTTP trigger waits for a run before answering 202 (``FLOW_HTTP_WAIT_S``).

    Raises:
        ConfigError: The variable is set but not a number >= 0 (names it, not its value).
    """
    return TriggerSettings().http_wait_s


@dataclass
class TrackedRun:
    """One run started by an HTTP trigger, while it runs and after."""

    runner: Runnable
    dataflow: str
    partition: str
    task: asyncio.Task[tuple[int, dict[str, Any]]]
    context: contextvars.Context
    started: float = field(default_factory=time.monotonic)
    held: list[Any] = field(default_factory=list)
    _run_id: str | None = None

    @property
    def function_name(self) -> str:
        """The flow function."""
        return self.runner.function_name

    @property
    def run_id(self) -> str | None:
        """The run's id (the one on ``_execution_log``), None until the run has started."""
        if self._run_id is None and self.task.done():
            self._run_id = self.outcome()[1].get("run_id")
        if self._run_id is None and not self.task.done():
            try:  # the run's id lives in the task's context while the run is in progress
                self._run_id = self.context.run(lambda: self.runner.run_id)
            except (ProducerLibError, RuntimeError):
                pass
        return self._run_id

    def outcome(self) -> tuple[int, dict[str, Any]]:
        """The run's HTTP status and body once done (cancelled or crashed: FAILED, 500)."""
        if self.task.cancelled():
            error = "the run was cancelled: its process or event loop stopped"
        elif (exc := self.task.exception()) is not None:  # not a run error: opening the reader
            error = f"{type(exc).__name__}: {exc}"
        else:
            return self.task.result()
        body = {
            "run_id": self._run_id,
            "function_name": self.function_name,
            "dataflow": self.dataflow,
            "partition": self.partition,
            "status": "FAILED",
            "error": error,
        }
        return 500, body

    def hold(self, *resources: Any) -> None:
        """Keep ``resources`` (producer, reader) open until the run ends."""
        for resource in resources:
            if resource is not None and resource not in self.held:
                resource.hold()
                self.held.append(resource)

    async def release(self) -> None:
        """End the holds; a close that a ``with`` block deferred runs now, once."""
        held, self.held = self.held, []
        for resource in held:
            done = resource.release()
            if asyncio.iscoroutine(done):
                await done


class RunRegistry:
    """The runs of this process: in progress, and the last finished ones."""

    def __init__(self, keep_finished: int = _KEEP_FINISHED) -> None:
        self._active: list[TrackedRun] = []
        self._finished: OrderedDict[str, TrackedRun] = OrderedDict()
        self._keep = keep_finished

    def start(
        self,
        runner: Runnable,
        request: RunRequest,
        producer: KafkaProducer | None,
        reader: SourceAdapter | None,
    ) -> TrackedRun:
        """Start ``request`` as a task of the running loop and track it."""
        context = contextvars.copy_context()
        tracked: TrackedRun

        async def supervised() -> tuple[int, dict[str, Any]]:
            try:
                return await execute(runner, request, producer, reader)
            finally:
                await tracked.release()

        task = asyncio.get_running_loop().create_task(supervised(), context=context)
        tracked = TrackedRun(runner, request.dataflow, request.partition, task, context)
        self._active.append(tracked)
        task.add_done_callback(lambda _: self._finish(tracked))
        return tracked

    def _finish(self, tracked: TrackedRun) -> None:
        if not tracked.task.cancelled() and (exc := tracked.task.exception()) is not None:
            tracked.runner.logger.error(
                "run crashed flow=%s dataflow=%s partition=%s",
                tracked.function_name,
                tracked.dataflow,
                tracked.partition,
                exc_info=exc,
            )
        if tracked not in self._active:  # forgotten already
            return
        self._active.remove(tracked)
        run_id = tracked.run_id
        if run_id is not None:
            self._finished[run_id] = tracked
            while len(self._finished) > self._keep:
                self._finished.popitem(last=False)

    def active(self, function_name: str, dataflow: str, partition: str) -> TrackedRun | None:
        """The run of (function, dataflow, partition) in progress here, if any."""
        key = (function_name, dataflow, partition)
        for tracked in self._active:
            if (tracked.function_name, tracked.dataflow, tracked.partition) == key:
                return tracked
        return None

    def running(self, function_name: str) -> list[TrackedRun]:
        """The runs of ``function_name`` in progress here."""
        return [t for t in self._active if t.function_name == function_name]

    def get(self, run_id: str) -> TrackedRun | None:
        """The run ``run_id`` if this process ran it (and still remembers it)."""
        for tracked in self._active:
            if tracked.run_id == run_id:
                return tracked
        return self._finished.get(run_id)

    def forget(self) -> None:
        """Forget the finished runs (as a restarted process would)."""
        self._finished.clear()
        self._active = [tracked for tracked in self._active if not tracked.task.done()]


REGISTRY = RunRegistry()


def status_url(run_url: str, run_id: str, function_name: str, dataflow: str, partition: str) -> str:
    """Where the run is polled: the run URL's last path segment becomes ``runs/<run_id>``.

    ``https://app/api/run?code=...`` -> ``https://app/api/runs/<id>?function=..&dataflow=..
    &partition=..``. The run URL's own query (a function key, ``code=``) is dropped: a
    status URL must never carry a secret; the caller sends its key again.
    """
    parts = urllib.parse.urlsplit(run_url)
    base = parts.path.rstrip("/").rsplit("/", 1)[0]
    path = f"{base}/runs/{urllib.parse.quote(run_id)}"
    query = urllib.parse.urlencode(
        {"function": function_name, "dataflow": dataflow, "partition": partition}
    )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, query, ""))


async def answer_run(
    runner: Runnable,
    request: RunRequest,
    run_url: str,
    producer: KafkaProducer | None = None,
    reader: SourceAdapter | None = None,
) -> Answer:
    """Run ``request`` and answer within ``FLOW_HTTP_WAIT_S``: its result, or 202 to poll.

    A second request for a (function, dataflow, partition) that runs here already is refused
    with 409 (it would fence the first), naming the running run's status URL; unless the
    caller started ``producer`` itself: starting it has fenced the first run already, so
    the new run goes on (the first fails as fenced), as with any concurrent run.
    """
    try:
        wait_s = http_wait_s()
    except ConfigError as exc:
        return 503, _rejected(runner, str(exc)), {}
    running = REGISTRY.active(runner.function_name, request.dataflow, request.partition)
    if running is not None and not (producer is not None and producer.is_open):
        body = _rejected(
            runner,
            f"a run of dataflow={request.dataflow} partition="
            f"{request.partition} is already in progress",
        )
        if running.run_id is not None:
            url = status_url(
                run_url, running.run_id, runner.function_name, running.dataflow, running.partition
            )
            body.update(run_id=running.run_id, status_url=url)
        return 409, body, {}
    tracked = REGISTRY.start(runner, request, producer, reader)
    try:
        await asyncio.wait({tracked.task}, timeout=wait_s)
        while not tracked.task.done() and tracked.run_id is None:  # not started yet
            await asyncio.wait({tracked.task}, timeout=_STEP_S)
    except asyncio.CancelledError:  # the request went away; the run goes on
        if not tracked.task.done():
            tracked.hold(producer, reader)
        raise
    if tracked.task.done():
        return (*tracked.outcome(), {})
    tracked.hold(producer, reader)  # the caller's with blocks end now; the run goes on
    return _accepted(tracked, run_url)


def _accepted(tracked: TrackedRun, run_url: str) -> Answer:
    run_id = tracked.run_id
    assert run_id is not None
    url = status_url(run_url, run_id, tracked.function_name, tracked.dataflow, tracked.partition)
    tracked.runner.logger.info(
        "run goes on after the HTTP answer flow=%s dataflow=%s partition=%s run_id=%s "
        "status_url=%s",
        tracked.function_name,
        tracked.dataflow,
        tracked.partition,
        run_id,
        url.split("?", 1)[0],
    )
    body = {**_running(tracked), "status_url": url}
    return 202, body, {"Location": url}


def _running(tracked: TrackedRun) -> dict[str, Any]:
    return {
        "run_id": tracked.run_id,
        "function_name": tracked.function_name,
        "dataflow": tracked.dataflow,
        "partition": tracked.partition,
        "status": "RUNNING",
        "running_s": round(time.monotonic() - tracked.started, 3),
    }


def _rejected(runner: Runnable, error: str) -> dict[str, Any]:
    return {"function_name": runner.function_name, "status": "REJECTED", "error": error}


async def run_status(run_id: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    """The state of run ``run_id`` (``GET /runs/{run_id}``): status code and JSON body.

    200 with ``RUNNING`` or the run result (``COMPLETED``/``FAILED``) when this process ran
    it; else 200 with the run's last ``_execution_log`` record when the query names its
    ``function``, ``dataflow`` and ``partition`` (``"source": "execution_log"``); 404 when
    neither knows the id; 400 when ``run_id`` is not a run id at all (a lowercase UUID, as
    the runner makes them; the body does not repeat it); 503 when Kafka cannot be read.
    """
    if not valid_run_id(run_id):
        return 400, {
            "status": "UNKNOWN",
            "error": "malformed run id: a run id is the UUID a run's answer gives",
        }
    tracked = REGISTRY.get(run_id)
    if tracked is not None:
        if not tracked.task.done():
            return 200, _running(tracked)
        return 200, tracked.outcome()[1]
    names = [query.get(name, "") for name in ("function", "dataflow", "partition")]
    if not all(names) or any("|" in name for name in names):
        return 404, {
            "run_id": run_id,
            "status": "UNKNOWN",
            "error": "this process does not know "
            "the run; give function, dataflow and partition (as in the status URL) "
            "to look it up on _execution_log",
        }
    try:
        settings = KafkaSettings.from_env()
        record = await asyncio.to_thread(read_run_record, settings, log_key(*names), run_id)
    except (ConfigError, ProduceError) as exc:
        return 503, {"run_id": run_id, "status": "UNKNOWN", "error": str(exc)}
    if record is None:
        return 404, {
            "run_id": run_id,
            "status": "UNKNOWN",
            "error": "no run with this id on "
            f"_execution_log for function={names[0]} dataflow={names[1]} "
            f"partition={names[2]}",
        }
    return 200, {**record, "source": "execution_log"}


def valid_run_id(run_id: str) -> bool:
    """Whether ``run_id`` has the shape of the run ids the runner makes."""
    return _RUN_ID.fullmatch(run_id) is not None


def read_run_record(
    settings: KafkaSettings, key: str, run_id: str, timeout_s: float = 30.0
) -> dict[str, Any] | None:
    """The last committed ``_execution_log`` record of run ``run_id`` under ``key``, or None.

    Raises:
        ProduceError: The topic cannot be read to its end within ``timeout_s``.
    """
    return read_latest(
        settings,
        EXECUTION_LOG_TOPIC,
        key,
        timeout_s,
        where=lambda record: record.get("run_id") == run_id,
    )


async def azure_run_status(req: func.HttpRequest) -> func.HttpResponse:
    """``GET runs/{run_id}`` for an Azure Functions app (see :func:`run_status`).

    In ``function_app.py``::

        @app.route(route="runs/{run_id}", methods=["GET"])
        async def run_status(req: func.HttpRequest) -> func.HttpResponse:
            return await azure_run_status(req)
    """
    import azure.functions as func

    run_id = req.route_params.get("run_id", "")
    status, body = await run_status(run_id, req.params)
    return func.HttpResponse(
        json.dumps(body, default=str), status_code=status, mimetype="application/json"
    )


async def azure_http(
    runner: Runnable,
    req: func.HttpRequest,
    producer: KafkaProducer | None,
    reader: SourceAdapter | None,
) -> func.HttpResponse:
    """Serve an Azure Functions HTTP request with ``runner`` (see the module docstring).

    A run still going after ``FLOW_HTTP_WAIT_S`` answers 202 and goes on, holding
    ``producer`` and ``reader`` open past the caller's ``with`` blocks until it ends
    (:mod:`producer_lib.runner.runs`).
    """
    import azure.functions as func

    try:
        body = req.get_json() if req.get_body() else None
    except ValueError:
        status, payload = (
            400,
            {
                "function_name": runner.function_name,
                "status": "REJECTED",
                "error": "the body is not valid JSON",
            },
        )
    else:
        try:
            request = parse_run_request(runner.function_name, req.params, body)
        except ConfigError as exc:
            status, payload = response_for(runner, exc)
        else:
            status, payload, headers = await answer_run(runner, request, req.url, producer, reader)
            return func.HttpResponse(
                json.dumps(payload, default=str),
                status_code=status,
                headers=headers,
                mimetype="application/json",
            )
    return func.HttpResponse(json.dumps(payload), status_code=status, mimetype="application/json")
