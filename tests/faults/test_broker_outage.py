"""The broker unreachable for longer than the delivery timeout, in the middle of a flow's run.

A FunctionRunner flow (written as flow authors write them) produces its rows; the broker then
goes away before the commit and stays away longer than ``message.timeout.ms``. The run must
fail loudly (``RunFailed`` naming the cause, status FAILED), nothing of the transaction may
become visible, the delta pointer must stay where it was, and a rerun once the broker is back
must publish every row exactly once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections import Counter

import pytest

from producer_lib import RunFailed, RunResult
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from tests.faults.conftest import OwnBroker
from tests.support.consume import consume_all
from tests.support.decode import decoded_values
from tests.support.runner_flows import NumbersFlow

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DELIVERY_TIMEOUT_MS = 4_000  # message.timeout.ms: how long librdkafka tries to deliver
TRANSACTION_TIMEOUT_MS = 20_000  # >= the delivery timeout; bounds each abort attempt
TIMED_OUT = "Local: Message timed out"  # librdkafka's text of a delivery timeout
RETRY_FAILED_RECORD_S = 25  # KAFKA_CONNECT_TIMEOUT_S: the runner retries its FAILED record
FAIL_WITHIN_S = 90  # the delivery timeout, the abort's bound and a broker start, with slack


@pytest.fixture
def flow(monkeypatch: pytest.MonkeyPatch, own_broker: OwnBroker) -> NumbersFlow:
    """A flow on the test's own broker, configured through ``KAFKA_*`` as users do.

    The initial load publishes ids 0..9 (TRUNCATE + REPLACE); each delta load the next 5 ids.
    ``before_produce`` is what the test does to the broker once the delta load has its target
    and before it produces the rows.
    """
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", own_broker.bootstrap)
    monkeypatch.setenv("KAFKA_TRANSACTION_TIMEOUT_MS", str(TRANSACTION_TIMEOUT_MS))
    monkeypatch.setenv("KAFKA_CONNECT_TIMEOUT_S", str(RETRY_FAILED_RECORD_S))
    monkeypatch.setenv("KAFKA_OVERRIDES", json.dumps({"message.timeout.ms": DELIVERY_TIMEOUT_MS}))
    monkeypatch.setenv("RUNNER_TEST_FUNCTION", f"outage_{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("RUNNER_TEST_TOPIC", f"t_outage_{uuid.uuid4().hex[:8]}")
    return NumbersFlow()


def _records(bootstrap: str, flow: NumbersFlow) -> list[dict]:
    key = f"{flow.function_name}|default|0".encode()
    messages = consume_all(bootstrap, EXECUTION_LOG_TOPIC)
    return [json.loads(m.value()) for m in messages if m.key() == key]


def _published_ids(bootstrap: str, topic: str) -> Counter:
    """How often each ID was published (committed), TRUNCATE rows left out."""
    values = decoded_values(bootstrap, topic)
    return Counter(v["ID"] for v in values if v["__change_type"] != "T")


def _run(flow: NumbersFlow, load: str):
    return asyncio.run(flow.run(load))


def _failed_delta_run(flow: NumbersFlow) -> tuple[RunResult, float]:
    """The result of a delta run that must fail, and the seconds it took."""
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        _run(flow, "delta")
    return failed.value.result, time.monotonic() - started


def _assert_rerun_publishes_every_row_once(own_broker: OwnBroker, flow: NumbersFlow) -> None:
    flow.before_produce = None
    rerun = _run(flow, "delta")
    assert (rerun.status, rerun.delta_pointer, rerun.rows) == ("COMPLETED", 14, {"TEST.NUMBERS": 5})
    assert _published_ids(own_broker.bootstrap, flow.topic) == Counter(range(15))
    assert _records(own_broker.bootstrap, flow)[-1]["delta_pointer"] == 14


def test_outage_during_commit_fails_the_run_and_a_rerun_publishes_every_row_once(
    own_broker: OwnBroker, flow: NumbersFlow
):
    """The broker is gone for longer than the delivery timeout, then back while the runner
    still tries to write its FAILED record: the run is FAILED on ``_execution_log``."""
    assert _run(flow, "initial").delta_pointer == 9
    outage: dict[str, float] = {}

    def come_back() -> None:  # away longer than the delivery timeout, back within the retry
        outage["from"] = time.monotonic()
        time.sleep(DELIVERY_TIMEOUT_MS / 1000 + 1)  # a quiet machine starts the JVM in less
        own_broker.start()
        outage["to"] = time.monotonic()

    comeback = threading.Thread(target=come_back)
    flow.before_produce = lambda: (own_broker.stop(), comeback.start())

    try:
        result, elapsed = _failed_delta_run(flow)
    finally:
        comeback.join()

    assert outage["to"] - outage["from"] > DELIVERY_TIMEOUT_MS / 1000
    assert elapsed < FAIL_WITHIN_S, f"the run took {elapsed:.0f}s to fail"
    assert (result.status, result.delta_pointer, result.commit_id) == ("FAILED", 9, None)
    assert TIMED_OUT in result.error and flow.topic in result.error, result.error
    last = _records(own_broker.bootstrap, flow)[-1]
    assert (last["status"], last["delta_pointer"], last["run_id"]) == ("FAILED", 9, result.run_id)
    assert last["error"] == result.error
    assert _published_ids(own_broker.bootstrap, flow.topic) == Counter(range(10))

    _assert_rerun_publishes_every_row_once(own_broker, flow)


def test_outage_past_the_end_of_the_run_fails_it_within_a_bound_pointer_unmoved(
    own_broker: OwnBroker, flow: NumbersFlow, caplog: pytest.LogCaptureFixture
):
    """The broker stays away until the run has given up: the run still ends, FAILED, within
    a bound, says that its FAILED record could not be written, and moves nothing."""
    assert _run(flow, "initial").delta_pointer == 9
    flow.before_produce = own_broker.stop
    caplog.set_level(logging.ERROR, logger="producer_lib")

    try:
        result, elapsed = _failed_delta_run(flow)
    finally:
        own_broker.start()

    assert elapsed < FAIL_WITHIN_S, f"the run took {elapsed:.0f}s to fail"
    assert (result.status, result.delta_pointer) == ("FAILED", 9)
    assert TIMED_OUT in result.error and flow.topic in result.error, result.error
    assert any("FAILED record not written" in r.getMessage() for r in caplog.records)
    last = _records(own_broker.bootstrap, flow)[-1]
    assert (last["status"], last["delta_pointer"]) == ("STARTED", 9)  # the pointer did not move
    assert _published_ids(own_broker.bootstrap, flow.topic) == Counter(range(10))

    _assert_rerun_publishes_every_row_once(own_broker, flow)
