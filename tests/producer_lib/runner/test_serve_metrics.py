"""``producer-lib serve``'s ``/metrics``, scraped after real runs against the broker."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiohttp.test_utils import TestClient, TestServer

from producer_lib.runner.metrics import RunMetrics, add_metrics
from producer_lib.runner.serve import build_app
from tests.support.metrics import Samples, samples
from tests.support.runner_flows import NumbersFlow

pytestmark = pytest.mark.kafka


@pytest.fixture
def flow_env(monkeypatch, kafka_bootstrap, new_topic):
    function = f"metrics_{uuid.uuid4().hex[:8]}"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNNER_TEST_FUNCTION": function,
        "RUNNER_TEST_TOPIC": new_topic(partitions=2),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return function


def _samples(text: str) -> Samples:
    return samples(text)


async def _scrape(client: TestClient) -> dict[str, float]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return _samples(await response.text())


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_metrics_count_runs_rows_durations_and_failures(flow_env, monkeypatch, tmp_path):
    f = flow_env
    gate = tmp_path / "gate"

    async def scenario() -> None:
        app = add_metrics(add_metrics(build_app(NumbersFlow()), NumbersFlow()), NumbersFlow())
        async with TestClient(TestServer(app)) as client:
            assert (await client.post("/run", params={"load": "initial"})).status == 200
            assert (await client.post("/run", params={"load": "full"})).status == 400
            monkeypatch.setenv("RUNNER_TEST_FAIL", "after_produce")
            assert (await client.post("/run", params={"load": "delta"})).status == 500
            monkeypatch.delenv("RUNNER_TEST_FAIL")
            got = await _scrape(client)
            ok = f'{{function="{f}",dataflow="default",status="COMPLETED"}}'
            assert got[f"producer_runs_total{ok}"] == 1
            assert (
                got[f'producer_runs_total{{function="{f}",dataflow="default",status="REJECTED"}}']
                == 1
            )
            assert got[f'producer_run_failures_total{{function="{f}",dataflow="default"}}'] == 1
            assert got[f'producer_rows_total{{function="{f}",table="TEST.NUMBERS"}}'] >= 11
            assert got[f'producer_run_duration_seconds_count{{function="{f}"}}'] == 2
            assert got[f'producer_run_duration_seconds_sum{{function="{f}"}}'] > 0
            assert (
                got[f'producer_last_success_timestamp_seconds{{function="{f}",dataflow="default"}}']
                > 0
            )

            # a run answered 202 is counted when it ends, not before
            monkeypatch.setenv("RUNNER_TEST_GATE", str(gate))
            monkeypatch.setenv("FLOW_HTTP_WAIT_S", "0.5")
            accepted = await client.post("/run", params={"load": "delta"})
            assert accepted.status == 202
            got = await _scrape(client)
            assert got[f"producer_runs_total{ok}"] == 1
            assert got[f'producer_runs_in_progress{{function="{f}"}}'] == 1
            gate.touch()
            for _ in range(200):
                got = await _scrape(client)
                if got[f"producer_runs_total{ok}"] == 2:
                    break
                await asyncio.sleep(0.1)
            assert got[f"producer_runs_total{ok}"] == 2
            assert got[f'producer_runs_in_progress{{function="{f}"}}'] == 0

    asyncio.run(scenario())


def test_metrics_count_the_rows_checked_and_failed_per_expectation():
    metrics = RunMetrics("orders")
    report = {
        "rows_checked": 10,
        "expectations": {
            "amount_positive": {"action": "drop", "failed": 2},
            "status": {"action": "warn", "failed": 0},
        },
    }
    metrics.record({"status": "COMPLETED", "expectations": {"SHOP.ORDERS": report}})
    metrics.record({"status": "FAILED", "expectations": {"SHOP.ORDERS": report}})
    body, _ = metrics.render()
    got = _samples(body.decode())
    table = 'function="orders",table="SHOP.ORDERS"'
    assert got[f"producer_expectation_rows_checked_total{{{table}}}"] == 20
    dropped = f'{table},expectation="amount_positive",action="drop"'
    assert got[f"producer_expectation_rows_failed_total{{{dropped}}}"] == 4
    warned = f'{table},expectation="status",action="warn"'
    assert got[f"producer_expectation_rows_failed_total{{{warned}}}"] == 0
