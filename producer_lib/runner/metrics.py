"""``GET /metrics`` of ``producer-lib serve``: runs, rows, durations and failures.

:func:`add_metrics` adds the route and a middleware to the server's application: every run
``POST /run`` answers is counted when it ends — at once for a 200/4xx/5xx
answer, when its task ends for one answered 202 that goes on. Kept with prometheus-client in
a registry per application (:mod:`producer_lib.prometheus`):

- ``producer_runs_total{function,dataflow,status}``: runs by outcome (``COMPLETED``,
  ``FAILED``, ``REJECTED``: bad parameters, a concurrent run refused, a body too large, a
  busy server; requests refused for want of credentials are not runs and are not counted);
- ``producer_run_failures_total{function,dataflow}``: the ``FAILED`` ones;
- ``producer_rows_total{function,table}``: rows produced (of completed and failed runs:
  a failed run's rows were aborted, but they were read and sent);
- ``producer_run_duration_seconds{function}`` (a histogram): runs that ran;
- ``producer_last_success_timestamp_seconds{function,dataflow}``: when a run last completed;
- ``producer_runs_in_progress{function}``;
- ``producer_expectation_rows_checked_total{function,table}``: rows checked against the
  table's expectations (:mod:`producer_lib.schema.expectations`);
- ``producer_expectation_rows_failed_total{function,table,expectation,action}``: rows that
  failed one (``warn``: produced, ``drop``: sent to ``_rejected_rows``, ``fail``: the run
  failed).

Counts and names only: no row's values, no run id, no error text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

from producer_lib.prometheus import exposition, new_registry
from producer_lib.runner.runs import REGISTRY

if TYPE_CHECKING:
    from producer_lib.runner.runner import FunctionRunner

__all__ = ["RunMetrics", "add_metrics"]

_KEY = web.AppKey("producer_lib_run_metrics", object)
_RUN_PATH = "/run"
# A flow run takes from a second (a delta load) to many minutes (an initial load).
_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RunMetrics:
    """Counts of the runs this process answered (prometheus-client's metrics: thread-safe)."""

    def __init__(self, function_name: str) -> None:
        """Nothing counted yet for flow ``function_name``."""
        self.function = function_name
        self.registry = new_registry()
        flow = ["function", "dataflow"]
        self._runs = Counter(
            "producer_runs", "Runs answered, by outcome.", [*flow, "status"], registry=self.registry
        )
        self._failures = Counter(
            "producer_run_failures", "Runs that failed.", flow, registry=self.registry
        )
        self._rows = Counter(
            "producer_rows",
            "Rows produced, per table.",
            ["function", "table"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "producer_run_duration_seconds",
            "Seconds each run took.",
            ["function"],
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self._success = Gauge(
            "producer_last_success_timestamp_seconds",
            "When a run last completed (Unix time).",
            flow,
            registry=self.registry,
        )
        self._checked = Counter(
            "producer_expectation_rows_checked",
            "Rows checked against the table's expectations.",
            ["function", "table"],
            registry=self.registry,
        )
        self._failed = Counter(
            "producer_expectation_rows_failed",
            "Rows that failed an expectation, by expectation and action.",
            ["function", "table", "expectation", "action"],
            registry=self.registry,
        )
        running = Gauge(
            "producer_runs_in_progress",
            "Runs in progress here.",
            ["function"],
            registry=self.registry,
        )
        running.labels(function_name).set_function(lambda: len(REGISTRY.running(function_name)))

    def record(self, body: Mapping[str, Any]) -> None:
        """Count the run whose answer (or final state) is ``body``."""
        status = str(body.get("status") or "UNKNOWN")
        dataflow = str(body.get("dataflow") or "default")
        self._runs.labels(self.function, dataflow, status).inc()
        if status == "FAILED":
            self._failures.labels(self.function, dataflow).inc()
        for table, rows in (body.get("rows") or {}).items():
            self._rows.labels(self.function, table).inc(int(rows))
        if isinstance(body.get("duration_s"), int | float):
            self._duration.labels(self.function).observe(float(body["duration_s"]))
        if status == "COMPLETED":
            self._success.labels(self.function, dataflow).set(time.time())
        for table, report in (body.get("expectations") or {}).items():
            self._checked.labels(self.function, table).inc(int(report["rows_checked"]))
            for name, count in report["expectations"].items():
                failed = self._failed.labels(self.function, table, name, str(count["action"]))
                failed.inc(int(count["failed"]))

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The metrics as a scrape asks for them: body and content type."""
        return exposition(self.registry, accept)


def add_metrics(app: web.Application, runner: FunctionRunner) -> web.Application:
    """Serve ``GET /metrics`` on ``app`` and count the runs it answers; returns ``app``.

    Calling it again on the same application changes nothing.
    """
    if _KEY in app:
        return app
    metrics = RunMetrics(runner.function_name)
    app[_KEY] = metrics

    async def scrape(request: web.Request) -> web.Response:
        body, content_type = metrics.render(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        started = request.path == _RUN_PATH and request.method == "POST"
        if started and isinstance(response, web.Response):
            _count(metrics, response)
        return response

    app.middlewares.append(count)
    app.router.add_get("/metrics", scrape)
    return app


def _count(metrics: RunMetrics, response: web.Response) -> None:
    try:
        body = json.loads(response.body or b"{}")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    if response.status != 202:
        metrics.record(body)
        return
    tracked = REGISTRY.get(str(body.get("run_id")))
    if tracked is not None:  # the run goes on: counted when its task ends
        tracked.task.add_done_callback(lambda _: metrics.record(tracked.outcome()[1]))
