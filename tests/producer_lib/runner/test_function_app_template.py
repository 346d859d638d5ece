"""The flow repo template's Azure Functions app, loaded as Azure would, calling the real broker."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from pathlib import Path

import azure.functions as func
import pytest

pytestmark = pytest.mark.kafka

TEMPLATE = Path(__file__).resolve().parents[3] / "templates" / "flow_repo" / "function_app.py"


def test_template_function_app_serves_run_and_health(monkeypatch, kafka_bootstrap, new_topic):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("RUNNER_TEST_FUNCTION", f"tmpl_{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("RUNNER_TEST_TOPIC", new_topic())
    monkeypatch.setenv("FLOW_RUNNER", "tests.support.runner_flows:NumbersFlow")
    spec = importlib.util.spec_from_file_location("function_app", TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    functions = {f.get_function_name(): f.get_user_function() for f in module.app.get_functions()}
    assert set(functions) == {"run", "health", "scheduled_delta"}

    health = functions["health"](func.HttpRequest("GET", "/api/health", body=b""))
    assert health.status_code == 200

    req = func.HttpRequest("POST", "/api/run", params={"load": "initial"}, body=b"")
    response = asyncio.run(functions["run"](req))
    assert response.status_code == 200
    assert json.loads(response.get_body())["rows"] == {"TEST.NUMBERS": 11}
