"""Azure Functions entry point of a flow repo (Python v2 programming model).

Copy this file to the root of the flow repo. ``FLOW_RUNNER`` (app setting) names the flow
class as ``MODULE:CLASS``, e.g. ``my_flows.orders:OrdersFlow``. Settings come from app
settings: ``KAFKA_BOOTSTRAP_SERVERS``, ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*``,
``SCHEMA_REGISTRY_URL``, ``FLOW_ENVIRONMENT`` ... (secrets from Key Vault references).

Call: ``POST https://<app>.azurewebsites.net/api/run?load=delta&dataflow=default&partition=0``
(or the same as a JSON body; without ``load`` the delta load runs, or the initial load while
no delta pointer exists). Answers: 200 completed, 202 still running (see below), 400 bad
request, 409 a run of the same dataflow/partition is in progress or took over, 500 failed,
503 retry later; the body is the run result.

Azure cuts an HTTP response at 230 s. A run still going after ``FLOW_HTTP_WAIT_S`` (default
200 s) answers 202 with ``run_id`` and ``status_url`` (also the ``Location`` header) and goes
on; poll ``GET /api/runs/<run_id>?function=..&dataflow=..&partition=..`` (send the function
key again) until ``status`` is no longer ``RUNNING``.

Scheduled delta loads are off unless the app setting ``FLOW_TIMER_SCHEDULE`` holds an
NCRONTAB expression (``0 */15 * * * *``: every 15 minutes).

Logs: the Functions host keeps its own logging (``host.json``'s ``logLevel``) unless the app
settings ``LOG_FORMAT`` (``json``: one JSON object a line) or ``LOG_LEVEL`` say otherwise.
"""

import json
import logging
import os

import azure.functions as func

from producer_lib.cli import load_runner
from producer_lib.logs import configure_logging
from producer_lib.runner import azure_run_status

configure_logging()  # LOG_FORMAT, LOG_LEVEL
app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
runner = load_runner(os.environ["FLOW_RUNNER"])


@app.route(route="run", methods=["POST"])  # no GET starts a load (a link or a prefetch can't)
async def run(req: func.HttpRequest) -> func.HttpResponse:
    """Run a load: ``load=initial|delta``, optional ``dataflow`` and ``partition``."""
    return await runner.http(req)


@app.route(route="runs/{run_id}", methods=["GET"])
async def run_status(req: func.HttpRequest) -> func.HttpResponse:
    """The state of a run that answered 202: RUNNING, COMPLETED or FAILED (404: unknown)."""
    return await azure_run_status(req)


@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def health(req: func.HttpRequest) -> func.HttpResponse:
    """Liveness: the flow class imported and was built."""
    body = {"status": "ok", "function_name": runner.function_name}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


TIMER_SCHEDULE = os.environ.get("FLOW_TIMER_SCHEDULE", "").strip()

if TIMER_SCHEDULE:  # opt-in: without the setting the app has no timer function at all

    @app.timer_trigger(schedule=TIMER_SCHEDULE, arg_name="timer", run_on_startup=False)
    async def scheduled_delta(timer: func.TimerRequest) -> None:
        """A delta load on the ``FLOW_TIMER_SCHEDULE`` schedule (NCRONTAB, six fields)."""
        result = await runner.run("auto")
        logging.info("scheduled load finished %s", json.dumps(result.to_json(), default=str))
