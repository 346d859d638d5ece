"""``producer-lib serve``: a flow as a small HTTP server, for containers.

Routes (same parameters, answers and status codes as the Azure Functions trigger,
:mod:`producer_lib.runner.triggers`):

- ``POST /run`` (or ``GET``): run a load; query string and/or JSON body. A run still going
  after ``FLOW_HTTP_WAIT_S`` (default 200 s) answers 202 with its ``status_url`` and goes on.
- ``GET /runs/{run_id}``: the state of a run (:func:`producer_lib.runner.runs.run_status`).
- ``GET /health``: 200 with the function name and the runs in progress; 503 with the
  problem (naming the environment variable, never its value) when the Kafka, flow or
  schema registry settings are missing or invalid, so a probe reports a misconfigured
  container before a run fails on it.
- ``GET /metrics``: runs, rows, durations, failures in Prometheus text
  (:mod:`producer_lib.runner.metrics`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from producer_lib.errors import ConfigError
from producer_lib.runner.metrics import add_metrics
from producer_lib.runner.runs import REGISTRY, answer_run, run_status
from producer_lib.runner.triggers import parse_run_request, response_for
from producer_lib.settings import FlowSettings, KafkaSettings, SchemaRegistrySettings

if TYPE_CHECKING:
    from producer_lib.runner.runner import FunctionRunner

__all__ = ["build_app", "serve"]

log = logging.getLogger(__name__)


def build_app(runner: FunctionRunner) -> web.Application:
    """The aiohttp application serving ``runner``."""

    async def health(_: web.Request) -> web.Response:
        running = sorted(
            (t.dataflow, t.partition, t.run_id or "")
            for t in REGISTRY.running(runner.function_name)
        )
        body: dict[str, Any] = {
            "status": "ok",
            "function_name": runner.function_name,
            "running": [
                {"dataflow": d, "partition": p, "run_id": r or None} for d, p, r in running
            ],
        }
        problem = settings_problem()
        if problem is not None:
            body.update(status="unhealthy", error=problem)
            return _json(503, body)
        return _json(200, body)

    async def run(request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else None
            run_request = parse_run_request(runner.function_name, request.query, body)
        except (ValueError, ConfigError) as exc:
            error = (
                exc
                if isinstance(exc, ConfigError)
                else ConfigError("the body is not valid JSON", flow=runner.function_name)
            )
            return _json(*response_for(runner, error))
        # a second run of a dataflow/partition in progress here is refused (409), not fenced
        # relative status URL: behind an ingress the host and scheme seen here are not public
        status, body, headers = await answer_run(runner, run_request, str(request.rel_url))
        return _json(status, body, headers)

    async def status(request: web.Request) -> web.Response:
        return _json(*await run_status(request.match_info["run_id"], request.query))

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_route("POST", "/run", run)
    app.router.add_route("GET", "/run", run)
    app.router.add_get("/runs/{run_id}", status)
    return add_metrics(app, runner)


def settings_problem() -> str | None:
    """Why the settings a run reads from the environment are unusable; None when they are fine.

    The settings are read again on each call, as a run would read them.
    """
    try:
        KafkaSettings()
        FlowSettings()
        SchemaRegistrySettings()
    except ConfigError as exc:
        return str(exc)
    return None


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(
        body, status=status, headers=headers, dumps=lambda o: json.dumps(o, default=str)
    )


def serve(runner: FunctionRunner, host: str = "0.0.0.0", port: int = 8080) -> None:
    """Serve ``runner`` until SIGINT/SIGTERM."""
    log.info(
        "serving flow=%s on http://%s:%d (POST /run, GET /runs/{id}, GET /health)",
        runner.function_name,
        host,
        port,
    )
    web.run_app(build_app(runner), host=host, port=port, print=None)
