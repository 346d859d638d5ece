"""``producer-lib serve``: a flow as a small HTTP server, for containers.

Routes (same parameters, answers and status codes as the Azure Functions trigger,
:mod:`producer_lib.runner.triggers`):

- ``POST /run`` (or ``GET``): run a load; query string and/or JSON body.
- ``GET /health``: 200 with the function name and the runs in progress; 503 with the
  problem (naming the environment variable, never its value) when the Kafka, flow or
  schema registry settings are missing or invalid, so a probe reports a misconfigured
  container before a run fails on it.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from producer_lib.errors import ConfigError
from producer_lib.runner.triggers import execute, parse_run_request, response_for
from producer_lib.settings import FlowSettings, KafkaSettings, SchemaRegistrySettings

if TYPE_CHECKING:
    from producer_lib.runner.runner import FunctionRunner

__all__ = ["build_app", "serve"]

log = logging.getLogger(__name__)


def build_app(runner: FunctionRunner) -> web.Application:
    """The aiohttp application serving ``runner``."""
    running: set[tuple[str, str]] = set()

    async def health(_: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "status": "ok",
            "function_name": runner.function_name,
            "running": [{"dataflow": d, "partition": p} for d, p in sorted(running)],
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
        key = (run_request.dataflow, run_request.partition)
        if key in running:  # the second run would fence the first: refuse it instead
            return _json(
                409,
                {
                    "function_name": runner.function_name,
                    "status": "REJECTED",
                    "error": f"a run of dataflow={key[0]} partition={key[1]} is "
                    "already in progress",
                },
            )
        running.add(key)
        try:
            return _json(*await execute(runner, run_request))
        finally:
            running.discard(key)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_route("POST", "/run", run)
    app.router.add_route("GET", "/run", run)
    return app


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


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, default=str))


def serve(runner: FunctionRunner, host: str = "0.0.0.0", port: int = 8080) -> None:
    """Serve ``runner`` until SIGINT/SIGTERM."""
    log.info(
        "serving flow=%s on http://%s:%d (POST /run, GET /health)", runner.function_name, host, port
    )
    web.run_app(build_app(runner), host=host, port=port, print=None)
