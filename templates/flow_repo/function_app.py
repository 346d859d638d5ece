"""Azure Functions entry point of a flow repo (Python v2 programming model).

Copy this file to the root of the flow repo. ``FLOW_RUNNER`` (app setting) names the flow
class as ``MODULE:CLASS``, e.g. ``my_flows.orders:OrdersFlow``. Settings come from app
settings: ``KAFKA_BOOTSTRAP_SERVERS``, ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*``,
``SCHEMA_REGISTRY_URL``, ``FLOW_ENVIRONMENT`` ... (secrets from Key Vault references).

Call: ``POST https://<app>.azurewebsites.net/api/run?load=delta&dataflow=default&partition=0``
(or the same as a JSON body). Answers: 200 completed, 400 bad request, 409 another run of the
same dataflow/partition took over, 500 failed, 503 retry later; the body is the run result.
A timer trigger for scheduled delta loads is at the end (remove it if an orchestrator calls).
"""

import json
import logging
import os

import azure.functions as func

from producer_lib.cli import load_runner

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
runner = load_runner(os.environ["FLOW_RUNNER"])


@app.route(route="run", methods=["GET", "POST"])
async def run(req: func.HttpRequest) -> func.HttpResponse:
    """Run a load: ``load=initial|delta``, optional ``dataflow`` and ``partition``."""
    return await runner.http(req)


@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def health(req: func.HttpRequest) -> func.HttpResponse:
    """Liveness: the flow class imported and was built."""
    body = {"status": "ok", "function_name": runner.function_name}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@app.timer_trigger(
    schedule=os.environ.get("FLOW_DELTA_SCHEDULE", "0 */15 * * * *"),
    arg_name="timer",
    run_on_startup=False,
)
async def scheduled_delta(timer: func.TimerRequest) -> None:
    """A delta load on a schedule (``FLOW_DELTA_SCHEDULE``, NCRONTAB; default every 15 min)."""
    result = await runner.run("delta")
    logging.info("scheduled delta load finished %s", json.dumps(result.to_json(), default=str))
