"""Runs that outlive their HTTP request (Azure cuts at 230 s): 202, polling, deferred closes.

The function under test is the flow authors' documented pattern, unchanged in shape::

    async with Reader(...) as reader:
        with KafkaProducer(...) as producer:
            return await runner.http(req, producer, reader)

with a reader that overrides ``__aenter__``/``__aexit__`` without ``super()`` (like the
documentation's StarTekReader), against the real broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
import uuid
from typing import Any

import azure.functions as func
import pytest
from aiohttp.test_utils import TestClient, TestServer

from producer_lib import FunctionRunner, KafkaProducer, KeySchema, RowType, SourceAdapter
from producer_lib.runner import azure_run_status
from producer_lib.runner.runs import REGISTRY
from producer_lib.runner.serve import build_app
from producer_lib.settings import KafkaSettings
from producer_lib.sources import DuckDBReader
from tests.support.consume import consume_all
from tests.support.runner_flows import NumbersFlow

pytestmark = pytest.mark.kafka

log = logging.getLogger("test_detached_runs")
ROWS = 7


class GatedFlow(FunctionRunner):
    """Seven rows, loaded once ``gate`` is set; ``fail`` raises after producing them."""

    source_system = "TEST"
    topic = ""
    gate: asyncio.Event
    fail = False

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        await self.gate.wait()
        schema = await reader.load(
            "GATED",
            f"SELECT range AS ID, 'row ' || range AS NAME FROM range({ROWS})",
            "TEST",
            "TEST",
        )
        schema.set_primary_keys("ID")
        target = producer.add_target(self.topic, "GATED", KeySchema(schema), schema)
        producer.produce_from_duckdb("GATED", target, 1000, RowType.REPLACE)
        if self.fail:
            raise RuntimeError("source went away mid-load")
        self.set_delta_pointer(ROWS - 1)
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        await self.initial_load(producer, reader)


class SessionReader(DuckDBReader):
    """Opens and closes its own 'session' in ``__aenter__``/``__aexit__``, no ``super()``."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger)
        self.session: dict[str, Any] | None = None
        self.closes = 0

    async def __aenter__(self):
        self.session = {"open": True}
        return self

    async def __aexit__(self, exc_type, exc_val, traceback):
        self.session["open"] = False  # None.close() if this ran twice
        self.session = None
        self.closes += 1


class CountingProducer(KafkaProducer):
    """The real producer, counting how often it really closes."""

    closes = 0

    def _close(self) -> None:
        self.closes += 1
        super()._close()


@pytest.fixture
def flow(monkeypatch, kafka_bootstrap, new_topic):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "1")
    name = f"detached_{uuid.uuid4().hex[:8]}"
    flow_class = type("Flow", (GatedFlow,), {"topic": new_topic(), "function_name": name})
    return {"class": flow_class, "bootstrap": kafka_bootstrap, "opened": []}


async def documented_function(flow: dict, req: func.HttpRequest) -> func.HttpResponse:
    """The documentation's function_app.py body."""
    async with SessionReader(log) as reader:
        with CountingProducer(
            "TEST", flow["class"].function_name, "bronze", "dev", KafkaSettings(), log
        ) as producer:
            flow["opened"].append((reader, producer))
            runner = flow["class"](flow["class"].function_name, log)
            return await runner.http(req, producer, reader)


def run_request(load: str = "initial") -> func.HttpRequest:
    return func.HttpRequest(
        "POST",
        "https://app.example/api/LABWARE/run?code=s3cret",
        params={"load": load, "code": "s3cret"},
        body=b"",
    )


async def poll(url: str) -> tuple[int, dict]:
    """GET the status URL through the Azure handler, as a function app routes it."""
    parts = urllib.parse.urlsplit(url)
    run_id = parts.path.rsplit("/", 1)[1]
    req = func.HttpRequest(
        "GET",
        url,
        route_params={"run_id": run_id},
        params=dict(urllib.parse.parse_qsl(parts.query)),
        body=b"",
    )
    response = await azure_run_status(req)
    return response.status_code, json.loads(response.get_body())


async def poll_until_done(url: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = await poll(url)
        assert status == 200, body
        if body["status"] != "RUNNING":
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"the run at {url} did not finish in {timeout_s} s")


async def start_detached(flow: dict) -> tuple[dict, asyncio.Event]:
    """Call the function with a load that waits at its gate: it must answer 202."""
    gate = asyncio.Event()
    flow["class"].gate = gate
    started = time.monotonic()
    # the load waits for the gate: without the 202 the call would never return
    response = await asyncio.wait_for(documented_function(flow, run_request()), timeout=30)
    assert time.monotonic() - started < 30
    body = json.loads(response.get_body())
    assert response.status_code == 202, body
    assert body["status"] == "RUNNING" and body["run_id"]
    assert response.headers["Location"] == body["status_url"]
    return body, gate


@pytest.mark.slow
def test_a_long_run_answers_202_goes_on_and_is_polled_to_completed(flow):
    async def scenario() -> None:
        accepted, gate = await start_detached(flow)
        url = accepted["status_url"]
        parts = urllib.parse.urlsplit(url)
        assert parts.path == f"/api/LABWARE/runs/{accepted['run_id']}"
        assert "s3cret" not in url  # the caller's function key is not echoed
        query = dict(urllib.parse.parse_qsl(parts.query))
        assert query == {
            "function": flow["class"].function_name,
            "dataflow": "default",
            "partition": "0",
        }

        # the caller's with blocks have ended: nothing was closed under the run
        ((reader, producer),) = flow["opened"]
        assert (reader.closes, producer.closes) == (0, 0)
        assert producer.is_open and reader.is_open and reader.session == {"open": True}
        status, body = await poll(url)
        assert (status, body["status"], body["run_id"]) == (200, "RUNNING", accepted["run_id"])

        gate.set()
        done = await poll_until_done(url)
        assert done["status"] == "COMPLETED", done
        assert done["rows"] == {"TEST.GATED": ROWS} and done["delta_pointer"] == ROWS - 1
        assert (reader.closes, producer.closes) == (1, 1)  # closed once, after the run
        assert not producer.is_open and not reader.is_open and reader.session is None

        keys = [m.key() for m in consume_all(flow["bootstrap"], flow["class"].topic)]
        assert len(keys) == len(set(keys)) == ROWS  # every row on Kafka, once

        REGISTRY.forget()  # as another instance of the app: the answer comes from Kafka
        status, logged = await poll(url)
        assert (status, logged["status"], logged["source"]) == (200, "COMPLETED", "execution_log")
        assert logged["run_id"] == accepted["run_id"] and logged["rows"] == {"TEST.GATED": ROWS}

        status, unknown = await poll(url.replace(accepted["run_id"], str(uuid.uuid4())))
        assert status == 404 and unknown["status"] == "UNKNOWN"
        status, bare = await poll(f"https://app.example/api/runs/{uuid.uuid4()}")
        assert status == 404 and "give function, dataflow and partition" in bare["error"]

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_detached_run_that_fails_is_polled_as_failed_with_its_error(flow):
    flow["class"].fail = True

    async def scenario() -> None:
        accepted, gate = await start_detached(flow)
        gate.set()
        done = await poll_until_done(accepted["status_url"])
        assert done["status"] == "FAILED" and "source went away mid-load" in done["error"]
        ((reader, producer),) = flow["opened"]
        assert (reader.closes, producer.closes) == (1, 1)
        assert consume_all(flow["bootstrap"], flow["class"].topic) == []  # aborted

        REGISTRY.forget()
        status, logged = await poll(accepted["status_url"])
        assert (status, logged["status"]) == (200, "FAILED")
        assert "source went away mid-load" in logged["error"]

    asyncio.run(scenario())


def test_a_run_done_in_time_answers_200_and_closes_with_the_with_blocks(flow, monkeypatch):
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "60")

    async def scenario() -> None:
        flow["class"].gate = asyncio.Event()
        flow["class"].gate.set()
        response = await documented_function(flow, run_request())
        assert response.status_code == 200
        assert json.loads(response.get_body())["rows"] == {"TEST.GATED": ROWS}
        assert "Location" not in response.headers
        ((reader, producer),) = flow["opened"]
        assert (reader.closes, producer.closes) == (1, 1)

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_second_documented_request_takes_over_a_run_that_goes_on(flow):
    """The caller's own producer fences the running run as it starts: the new run goes on."""

    async def scenario() -> None:
        first, gate = await start_detached(flow)
        second, _ = await start_detached(flow)  # a new gate for the second run
        flow["class"].gate.set()
        gate.set()
        assert (await poll_until_done(second["status_url"]))["status"] == "COMPLETED"
        fenced = await poll_until_done(first["status_url"])
        assert fenced["status"] == "FAILED" and fenced["error"]
        keys = [m.key() for m in consume_all(flow["bootstrap"], flow["class"].topic)]
        assert len(keys) == len(set(keys)) == ROWS
        assert [(r.closes, p.closes) for r, p in flow["opened"]] == [(1, 1), (1, 1)]

    asyncio.run(scenario())


def test_a_bad_wait_setting_is_refused_naming_the_variable(flow, monkeypatch):
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "soon")
    flow["class"].gate = asyncio.Event()
    response = asyncio.run(documented_function(flow, run_request()))
    body = json.loads(response.get_body())
    assert response.status_code == 503 and "FLOW_HTTP_WAIT_S" in body["error"]
    assert "soon" not in body["error"]


# -- producer-lib serve ---------------------------------------------------------------------


@pytest.mark.slow
def test_container_server_answers_202_and_serves_the_run_status(monkeypatch, tmp_path, flow):
    monkeypatch.setenv("RUNNER_TEST_FUNCTION", f"serve_{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("RUNNER_TEST_TOPIC", flow["class"].topic)
    gate = tmp_path / "gate"
    monkeypatch.setenv("RUNNER_TEST_GATE", str(gate))

    async def scenario() -> None:
        async with TestClient(TestServer(build_app(NumbersFlow()))) as client:
            monkeypatch.setenv("FLOW_HTTP_WAIT_S", "60")
            assert (await client.post("/run", params={"load": "initial"})).status == 200
            monkeypatch.setenv("FLOW_HTTP_WAIT_S", "1")
            accepted = await client.post("/run", json={"load": "delta"})
            body = await accepted.json()
            assert accepted.status == 202 and body["status"] == "RUNNING"
            assert accepted.headers["Location"] == body["status_url"]
            assert body["status_url"].startswith(f"/runs/{body['run_id']}?function=")
            again = await client.post("/run", json={"load": "delta"})
            assert again.status == 409  # it would fence the run in progress
            assert (await again.json())["status_url"] == body["status_url"]
            health = await (await client.get("/health")).json()
            assert health["running"] == [{"dataflow": "default", "partition": "0"}]  # no run id
            gate.touch()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                state = await (await client.get(body["status_url"])).json()
                if state["status"] != "RUNNING":
                    break
                await asyncio.sleep(0.1)
            assert state["status"] == "COMPLETED" and state["delta_pointer"] == 14
            assert (await client.get(f"/runs/{uuid.uuid4()}")).status == 404

    asyncio.run(scenario())
    assert len(consume_all(flow["bootstrap"], flow["class"].topic)) == 16


# -- holds without a run -----------------------------------------------------------------------


class SuperReader(DuckDBReader):
    """Extends ``close`` and calls ``super().__aexit__``: the usual way."""

    closes = 0

    async def __aexit__(self, *exc):
        await super().__aexit__(*exc)

    async def close(self) -> None:
        self.closes += 1


@pytest.mark.parametrize("reader_class", [SessionReader, SuperReader, DuckDBReader])
def test_a_held_reader_closes_once_when_released_not_when_its_block_ends(reader_class):
    async def scenario() -> None:
        async with reader_class(log) as reader:
            reader.hold()
        assert reader.is_open and reader.is_held  # the block ended; the holder still reads
        await reader.release()
        assert not reader.is_open and not reader.is_held
        await reader.release()  # a second release closes nothing more
        if hasattr(reader, "closes"):
            assert reader.closes == 1
        async with reader_class(log) as unheld:
            pass
        assert not unheld.is_open  # without a hold nothing changes

    asyncio.run(scenario())
