"""The three triggers of a run (Azure Functions HTTP, container server, CLI), fencing, and the
pointer-moves-with-the-data kill test, against the real broker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import azure.functions as func
import pytest
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import Consumer, KafkaError, TopicPartition

from producer_lib.cli import main
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from producer_lib.runner.serve import build_app
from tests.support.consume import consume_all
from tests.support.runner_flows import NumbersFlow

pytestmark = pytest.mark.kafka

FLOW = "tests.support.runner_flows:NumbersFlow"


@pytest.fixture
def flow_env(monkeypatch, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    function = f"trig_{uuid.uuid4().hex[:8]}"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNNER_TEST_FUNCTION": function,
        "RUNNER_TEST_TOPIC": topic,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"topic": topic, "function": function, "bootstrap": kafka_bootstrap}


def request(params: dict | None = None, body: bytes = b"") -> func.HttpRequest:
    return func.HttpRequest("POST", "http://localhost/api/numbers", params=params or {}, body=body)


def http(req: func.HttpRequest) -> tuple[int, dict]:
    response = asyncio.run(NumbersFlow().http(req))
    return response.status_code, json.loads(response.get_body())


def last_log(env: dict) -> dict:
    key = f"{env['function']}|default|0".encode()
    records = [m for m in consume_all(env["bootstrap"], EXECUTION_LOG_TOPIC) if m.key() == key]
    return json.loads(records[-1].value())


def visible_until_stable(bootstrap: str, topic: str) -> int:
    """Messages a read_committed consumer sees now, up to the last stable offset (an open
    transaction of a killed process holds that offset back until it is aborted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    seen, pending, deadline = 0, set(parts), time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
            pending.discard(msg.partition())
        elif not msg.error():
            seen += 1
    consumer.close()
    assert not pending, "partitions never reached their end"
    return seen


# -- Azure Functions HTTP trigger -------------------------------------------------------------


def test_http_trigger_runs_a_load_and_answers_with_the_result(flow_env):
    status, body = http(request({"load": "initial"}))
    assert status == 200
    assert body["status"] == "COMPLETED" and body["rows"] == {"TEST.NUMBERS": 11}
    assert body["commit_id"] and body["run_id"] and body["duration_s"] > 0
    status, body = http(request(body=json.dumps({"load": "delta"}).encode()))
    assert (status, body["delta_pointer"]) == (200, 14)


@pytest.mark.parametrize(
    ("params", "body", "error"),
    [
        ({"load": "full"}, b"", "load must be one of initial, delta"),
        ({}, b"{not json", "not valid JSON"),
        ({}, b'{"load": "initial", "tables": 1}', "unknown parameter"),
        ({"load": "initial", "dataflow": "a|b"}, b"", "dataflow must be"),
    ],
    ids=["bad-load", "bad-json", "unknown-param", "bad-dataflow"],
)
def test_http_trigger_rejects_bad_requests_with_400(flow_env, params, body, error):
    status, answer = http(request(params, body))
    assert status == 400 and error in answer["error"]
    assert answer["status"] == "REJECTED"


def test_a_request_without_load_runs_the_delta_load(flow_env):
    """The documentation's route (``@app.route(route="LABWARE/run")``) passes no load."""
    assert http(request({"load": "initial"}))[0] == 200
    status, body = http(request())
    assert (status, body["load"], body["delta_pointer"]) == (200, "delta", 14)


def test_a_request_without_load_and_without_a_pointer_runs_the_initial_load(flow_env):
    status, body = http(request())
    assert (status, body["load"], body["rows"]) == (200, "initial", {"TEST.NUMBERS": 11})


def test_http_trigger_reports_a_failed_load_with_500(flow_env, monkeypatch):
    http(request({"load": "initial"}))
    monkeypatch.setenv("RUNNER_TEST_FAIL", "after_produce")
    status, body = http(request({"load": "delta"}))
    assert status == 500 and body["status"] == "FAILED"
    assert "source went away" in body["error"] and body["delta_pointer"] == 9


@pytest.mark.slow
def test_http_trigger_answers_503_when_kafka_is_unreachable(flow_env, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("KAFKA_CONNECT_TIMEOUT_S", "2")
    started = time.monotonic()
    status, body = http(request({"load": "initial"}))
    assert status == 503 and "cannot start a transactional producer" in body["error"]
    assert time.monotonic() - started < 20


# -- container server ----------------------------------------------------------------------------


def test_container_server_runs_loads_and_refuses_a_concurrent_run(flow_env, monkeypatch, tmp_path):
    gate = tmp_path / "gate"
    monkeypatch.setenv("RUNNER_TEST_GATE", str(gate))

    async def scenario() -> None:
        async with TestClient(TestServer(build_app(NumbersFlow()))) as client:
            health = await client.get("/health")
            assert health.status == 200
            assert (await health.json())["function_name"] == flow_env["function"]
            first = await client.post("/run", params={"load": "initial"})
            assert first.status == 200 and (await first.json())["rows"] == {"TEST.NUMBERS": 11}
            held = asyncio.create_task(client.post("/run", json={"load": "delta"}))
            while not (await (await client.get("/health")).json())["running"]:
                await asyncio.sleep(0.05)
            second = await client.post("/run", json={"load": "delta"})
            assert second.status == 409 and "already in progress" in (await second.json())["error"]
            gate.touch()
            done = await held
            assert done.status == 200 and (await done.json())["delta_pointer"] == 14

    asyncio.run(scenario())


# -- command line ---------------------------------------------------------------------------------


def test_cli_runs_a_load_and_prints_the_result(flow_env, capsys, monkeypatch):
    assert main(["run", FLOW, "--load", "initial"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"TEST.NUMBERS": 11}
    monkeypatch.setenv("RUNNER_TEST_FAIL", "after_produce")
    assert main(["run", FLOW, "--load", "delta"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "FAILED"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "expected MODULE:CLASS"),
        ("tests.nope:X", "cannot import"),
        ("json:dumps", "not a FunctionRunner subclass"),
    ],
    ids=["malformed", "missing-module", "not-a-runner"],
)
def test_cli_rejects_a_bad_runner_spec(spec, message, capsys):
    assert main(["run", spec, "--load", "initial"]) == 2
    assert message in capsys.readouterr().err


# -- fencing and crashes ---------------------------------------------------------------------------


def _cli(env: dict, *args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "producer_lib.cli", "run", FLOW, *args],
        env={**os.environ, **env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )


@pytest.mark.slow
def test_a_concurrent_run_of_the_same_partition_fences_the_first(flow_env, tmp_path):
    assert main(["run", FLOW, "--load", "initial"]) == 0
    gate = tmp_path / "gate"
    first = _cli({}, "--load", "delta", RUNNER_TEST_GATE=str(gate))
    deadline = time.monotonic() + 60
    while last_log(flow_env)["status"] != "STARTED" and time.monotonic() < deadline:
        time.sleep(0.2)  # the first run has started and waits at the gate
    second = asyncio.run(NumbersFlow().run("delta"))  # same function/dataflow/partition
    assert second.delta_pointer == 14
    gate.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 1, err.decode()[-2000:]
    assert out, err.decode()[-3000:]
    assert json.loads(out)["status"] == "FAILED"
    assert len(consume_all(flow_env["bootstrap"], flow_env["topic"])) == 16  # 11 + 5, once
    assert last_log(flow_env)["delta_pointer"] == 14  # the fenced run could not move it


@pytest.mark.slow
def test_pointer_moves_exactly_with_the_data_when_the_flow_is_killed(flow_env):
    assert main(["run", FLOW, "--load", "initial"]) == 0
    killed = _cli({}, "--load", "delta", RUNNER_TEST_FAIL="kill")  # SIGKILL before commit
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    assert visible_until_stable(flow_env["bootstrap"], flow_env["topic"]) == 11
    assert last_log(flow_env)["delta_pointer"] == 9

    rerun = asyncio.run(NumbersFlow().run("delta"))
    assert (rerun.delta_pointer, rerun.rows) == (14, {"TEST.NUMBERS": 5})
    assert len(consume_all(flow_env["bootstrap"], flow_env["topic"])) == 16
    assert last_log(flow_env)["delta_pointer"] == 14
