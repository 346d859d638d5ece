"""``GET /metrics`` of ``producer-lib serve``: runs, rows, durations and failures.

:func:`add_metrics` adds the route and a middleware to the server's application: every run
``POST /run`` answers is counted when it ends — at once for a 200/4xx/5xx
answer, when its task ends for one answered 202 that goes on. Prometheus text
(:mod:`producer_lib.prometheus`):

- ``producer_runs_total{function,dataflow,status}``: runs by outcome (``COMPLETED``,
  ``FAILED``, ``REJECTED``: bad parameters, a concurrent run refused, a body too large, a
  busy server; requests refused for want of credentials are not runs and are not counted);
- ``producer_run_failures_total{function,dataflow}``: the ``FAILED`` ones;
- ``producer_rows_total{function,table}``: rows produced (of completed and failed runs:
  a failed run's rows were aborted, but they were read and sent);
- ``producer_run_duration_seconds{function}`` (``_sum``, ``_count``): runs that ran;
- ``producer_last_success_timestamp_seconds{function,dataflow}``: when a run last completed;
- ``producer_runs_in_progress{function}``;
- ``producer_expectation_rows_checked_total{function,table}``: rows checked against the
  table's expectations (:mod:`producer_lib.schema.expectations`);
- ``producer_expectation_rows_failed_total{function,table,expectation,action}``: rows that
  failed one (``warn``: produced, ``drop``: sent to ``_rejected_rows``, ``fail``: the run
  failed).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from producer_lib.prometheus import CONTENT_TYPE, family, summary
from producer_lib.runner.runs import REGISTRY

if TYPE_CHECKING:
    from producer_lib.runner.runner import FunctionRunner

__all__ = ["RunMetrics", "add_metrics"]

_KEY = web.AppKey("producer_lib_run_metrics", object)
_RUN_PATH = "/run"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RunMetrics:
    """Counts of the runs this process answered (thread-safe)."""

    def __init__(self, function_name: str) -> None:
        """Nothing counted yet for flow ``function_name``."""
        self.function = function_name
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], int] = {}  # (dataflow, status) -> runs
        self._rows: dict[str, int] = {}
        self._duration_sum, self._duration_count = 0.0, 0
        self._success: dict[str, float] = {}  # dataflow -> Unix time
        self._checked: dict[str, int] = {}  # table -> rows checked against expectations
        self._failed: dict[tuple[str, str, str], int] = {}  # (table, name, action) -> rows

    def record(self, body: Mapping[str, Any]) -> None:
        """Count the run whose answer (or final state) is ``body``."""
        status = str(body.get("status") or "UNKNOWN")
        dataflow = str(body.get("dataflow") or "default")
        with self._lock:
            self._runs[(dataflow, status)] = self._runs.get((dataflow, status), 0) + 1
            for table, rows in (body.get("rows") or {}).items():
                self._rows[table] = self._rows.get(table, 0) + int(rows)
            if isinstance(body.get("duration_s"), int | float):
                self._duration_sum += float(body["duration_s"])
                self._duration_count += 1
            if status == "COMPLETED":
                self._success[dataflow] = time.time()
            self._count_expectations(body.get("expectations") or {})

    def _count_expectations(self, tables: Mapping[str, Any]) -> None:
        for table, report in tables.items():
            self._checked[table] = self._checked.get(table, 0) + int(report["rows_checked"])
            for name, count in report["expectations"].items():
                key = (table, name, str(count["action"]))
                self._failed[key] = self._failed.get(key, 0) + int(count["failed"])

    def render(self) -> str:
        """The metrics in Prometheus text format."""
        f = self.function
        running = len(REGISTRY.running(f))
        with self._lock:
            runs = sorted(self._runs.items())
            lines = [
                *family(
                    "producer_runs_total",
                    "counter",
                    "Runs answered, by outcome.",
                    [({"function": f, "dataflow": d, "status": s}, n) for (d, s), n in runs],
                ),
                *family(
                    "producer_run_failures_total",
                    "counter",
                    "Runs that failed.",
                    [({"function": f, "dataflow": d}, n) for (d, s), n in runs if s == "FAILED"],
                ),
                *family(
                    "producer_rows_total",
                    "counter",
                    "Rows produced, per table.",
                    [({"function": f, "table": t}, n) for t, n in sorted(self._rows.items())],
                ),
                *summary(
                    "producer_run_duration_seconds",
                    "Seconds each run took.",
                    [({"function": f}, self._duration_sum, self._duration_count)],
                ),
                *family(
                    "producer_last_success_timestamp_seconds",
                    "gauge",
                    "When a run last completed (Unix time).",
                    [({"function": f, "dataflow": d}, t) for d, t in sorted(self._success.items())],
                ),
                *family(
                    "producer_runs_in_progress",
                    "gauge",
                    "Runs in progress here.",
                    [({"function": f}, running)],
                ),
                *self._expectation_families(),
            ]
        return "\n".join(lines) + "\n"

    def _expectation_families(self) -> list[str]:
        f = self.function
        failed = [
            ({"function": f, "table": t, "expectation": e, "action": a}, n)
            for (t, e, a), n in sorted(self._failed.items())
        ]
        return [
            *family(
                "producer_expectation_rows_checked_total",
                "counter",
                "Rows checked against the table's expectations.",
                [({"function": f, "table": t}, n) for t, n in sorted(self._checked.items())],
            ),
            *family(
                "producer_expectation_rows_failed_total",
                "counter",
                "Rows that failed an expectation, by expectation and action.",
                failed,
            ),
        ]


def add_metrics(app: web.Application, runner: FunctionRunner) -> web.Application:
    """Serve ``GET /metrics`` on ``app`` and count the runs it answers; returns ``app``.

    Calling it again on the same application changes nothing.
    """
    if _KEY in app:
        return app
    metrics = RunMetrics(runner.function_name)
    app[_KEY] = metrics

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render().encode(), headers={"Content-Type": CONTENT_TYPE})

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
