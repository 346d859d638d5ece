"""``producer-lib serve``: a flow as a small HTTP server, for containers.

Routes (same parameters, answers and status codes as the Azure Functions trigger,
:mod:`producer_lib.runner.triggers`); every one but ``/health`` needs a credential
(:mod:`producer_lib.runner.serve_guard`, ``docs/SERVING.md``):

- ``POST /run``: run a load; query string and/or JSON body. A run still going after
  ``FLOW_HTTP_WAIT_S`` (default 200 s) answers 202 with its ``status_url`` and goes on.
  Any other method answers 405 (``Allow: POST``): no GET starts a load. A body over
  ``FLOW_MAX_BODY_BYTES`` answers 413; one run more than ``FLOW_MAX_CONCURRENT_RUNS``, 429.
- ``GET /runs/{run_id}``: the state of a run of this flow
  (:func:`producer_lib.runner.runs.run_status`); a malformed run id answers 400.
- ``GET /health`` (anonymous): 200 with the function name and the dataflows and partitions
  running; 503 with the problem (naming the environment variable, never its value) when the
  Kafka, flow or schema registry settings are missing or invalid, so a probe reports a
  misconfigured container before a run fails on it.
- ``GET /metrics``: runs, rows, durations, failures in Prometheus text
  (:mod:`producer_lib.runner.metrics`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from producer_lib.auth import Authenticator, check_exposure
from producer_lib.errors import ConfigError
from producer_lib.runner.metrics import add_metrics
from producer_lib.runner.runs import REGISTRY, answer_run, run_status
from producer_lib.runner.serve_guard import (
    AccessLogger,
    ServeSettings,
    guard,
    json_response,
)
from producer_lib.runner.triggers import RunRequest, parse_run_request, response_for
from producer_lib.settings import FlowSettings, KafkaSettings, SchemaRegistrySettings

if TYPE_CHECKING:
    from producer_lib.runner.runner import FunctionRunner

__all__ = ["build_app", "serve"]

log = logging.getLogger(__name__)
access_log = logging.getLogger("producer_lib.runner.access")

_RETRY_AFTER_S = "30"  # a run of a flow takes seconds to hours; a busy server is asked later


def build_app(
    runner: FunctionRunner,
    authenticator: Authenticator | None = None,
    limits: ServeSettings | None = None,
    insecure: bool = False,
) -> web.Application:
    """The aiohttp application serving ``runner``.

    Args:
        runner: The flow.
        authenticator: Who gets in (default: from ``FLOW_AUTH_*``). One with nothing
            configured lets everyone in: :func:`serve` allows that only on loopback or with
            ``insecure``.
        limits: Body size and concurrent runs (default: from ``FLOW_*``).
        insecure: The ``--insecure`` flag (see :func:`producer_lib.runner.serve_guard.guard`).
    """
    authenticator = authenticator or Authenticator.from_settings(runner.function_name)
    limits = limits or ServeSettings()
    app = web.Application(
        middlewares=[guard(authenticator, insecure)], client_max_size=limits.max_body_bytes
    )
    app.router.add_get("/health", _health(runner))
    app.router.add_route("*", "/run", _run(runner, limits))
    app.router.add_get("/runs/{run_id}", _status(runner))
    return add_metrics(app, runner)


def _health(runner: FunctionRunner) -> Any:
    async def health(_: web.Request) -> web.Response:
        running = sorted((t.dataflow, t.partition) for t in REGISTRY.running(runner.function_name))
        body: dict[str, Any] = {
            "status": "ok",
            "function_name": runner.function_name,
            "running": [{"dataflow": d, "partition": p} for d, p in running],
        }
        problem = settings_problem()
        if problem is not None:
            body.update(status="unhealthy", error=problem)
            return json_response(503, body)
        return json_response(200, body)

    return health


def _run(runner: FunctionRunner, limits: ServeSettings) -> Any:
    async def run(request: web.Request) -> web.Response:
        if request.method != "POST":  # a link, an <img>, a prefetch must never start a load
            refusal = _rejected(runner, "use POST to start a run; no GET starts one")
            return json_response(405, refusal, {"Allow": "POST"})
        run_request = await _read_run_request(runner, request, limits)
        if isinstance(run_request, web.Response):
            return run_request
        busy = _busy(runner, run_request, limits)
        if busy is not None:
            return busy
        # a second run of a dataflow/partition in progress here is refused (409), not fenced
        # relative status URL: behind an ingress the host and scheme seen here are not public
        status, answer, headers = await answer_run(runner, run_request, str(request.rel_url))
        return json_response(status, answer, headers)

    return run


async def _read_run_request(
    runner: FunctionRunner, request: web.Request, limits: ServeSettings
) -> RunRequest | web.Response:
    """The run a request asks for, or the answer refusing it (400, 413)."""
    too_large = _rejected(
        runner,
        f"the request body is larger than {limits.max_body_bytes} bytes "
        "(FLOW_MAX_BODY_BYTES); a run request needs a few parameters",
    )
    if (request.content_length or 0) > limits.max_body_bytes:
        return json_response(413, too_large)
    try:
        body = await request.json() if request.can_read_body else None
        return parse_run_request(runner.function_name, request.query, body)
    except web.HTTPRequestEntityTooLarge:  # a chunked body that passed the limit
        return json_response(413, too_large)
    except ValueError:
        error = ConfigError("the body is not valid JSON", flow=runner.function_name)
        return json_response(*response_for(runner, error))
    except ConfigError as exc:
        return json_response(*response_for(runner, exc))


def _busy(
    runner: FunctionRunner, request: RunRequest, limits: ServeSettings
) -> web.Response | None:
    """429 when the run would be one too many here; None otherwise (a 409 wins over it)."""
    if REGISTRY.active(runner.function_name, request.dataflow, request.partition) is not None:
        return None  # answer_run refuses it with 409 and the running run's status URL
    running = len(REGISTRY.running(runner.function_name))
    if running < limits.max_concurrent_runs:
        return None
    body = _rejected(
        runner,
        f"{running} runs are in progress here, the most this server takes "
        "(FLOW_MAX_CONCURRENT_RUNS); retry later",
    )
    return json_response(429, body, {"Retry-After": _RETRY_AFTER_S})


def _status(runner: FunctionRunner) -> Any:
    async def status(request: web.Request) -> web.Response:
        if request.query.get("function", runner.function_name) != runner.function_name:
            # this server's credentials are for this flow: no look at another flow's runs
            body = {"status": "UNKNOWN", "error": "not a run of this flow"}
            return json_response(404, body)
        return json_response(*await run_status(request.match_info["run_id"], request.query))

    return status


def _rejected(runner: FunctionRunner, error: str) -> dict[str, Any]:
    return {"function_name": runner.function_name, "status": "REJECTED", "error": error}


def settings_problem() -> str | None:
    """Why the settings a run reads from the environment are unusable; None when they are fine.

    The settings are read again on each call, as a run would read them.
    """
    try:
        KafkaSettings.from_env()
        FlowSettings()
        SchemaRegistrySettings()
    except ConfigError as exc:
        return str(exc)
    return None


def serve(
    runner: FunctionRunner, host: str = "127.0.0.1", port: int = 8080, insecure: bool = False
) -> None:
    """Serve ``runner`` until SIGINT/SIGTERM.

    Raises:
        ConfigError: The authentication or server settings are invalid, or ``host`` is not
            loopback while no authentication is configured and ``insecure`` is false.
    """
    authenticator = Authenticator.from_settings(runner.function_name)
    check_exposure(host, authenticator, insecure)
    limits = ServeSettings()
    log.info(
        "serving flow=%s on http://%s:%d (POST /run, GET /runs/{id}, GET /health, GET /metrics) "
        "%s max_body_bytes=%d max_concurrent_runs=%d",
        runner.function_name,
        host,
        port,
        authenticator.describe() if authenticator.configured else "auth=NONE",
        limits.max_body_bytes,
        limits.max_concurrent_runs,
    )
    web.run_app(
        build_app(runner, authenticator, limits, insecure),
        host=host,
        port=port,
        print=None,
        access_log=access_log,
        access_log_class=AccessLogger,
    )
