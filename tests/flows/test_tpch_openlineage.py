"""The tpch flow sends OpenLineage events over HTTP while it loads into the real broker.

The events go to a small HTTP server of the test (tests/support/openlineage.py) through the
client's own HTTP transport; each is checked against the spec's required fields, and the
column lineage of COMPLETE against the ``_lineage`` documents of the same commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid

import pytest

from flows.tpch import TpchFlow
from flows.tpch_source import TABLES, create_source
from producer_lib.kafka.topics import LINEAGE_TOPIC
from producer_lib.runner.openlineage_events import close_senders
from producer_lib.runner.result import RunFailed
from tests.support.consume import consume_all
from tests.support.openlineage import LineageReceiver, check_run_event, closed_port_url

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def tpch_source(tmp_path_factory):
    source = tmp_path_factory.mktemp("tpch") / "source.duckdb"
    create_source(source, scale_factor=0.01)  # below 0.01 dbgen repeats partsupp keys
    return source


@pytest.fixture
def tpch_env(monkeypatch, tpch_source, kafka_bootstrap):
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(name)
    prefix = f"t_tpch_ol_{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TPCH_SOURCE_PATH", str(tpch_source))
    monkeypatch.setenv("TPCH_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "flows-test")
    yield {"prefix": prefix, "bootstrap": kafka_bootstrap}
    close_senders()  # a Kafka transport's producer must not outlive its test's broker


def lineage_documents(bootstrap: str, commit_id: str) -> dict[str, dict]:
    values = [json.loads(m.value()) for m in consume_all(bootstrap, LINEAGE_TOPIC)]
    return {v["target"]: v for v in values if v["commit_id"] == commit_id}


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_a_load_sends_start_then_complete_with_datasets_and_column_lineage(tpch_env, monkeypatch):
    with LineageReceiver().running() as receiver:
        monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
        result = asyncio.run(TpchFlow().run("initial"))

    events = receiver.of_run(result.run_id)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert set(receiver.paths) == {"/api/v1/lineage"}
    for event in events:
        check_run_event(event)
        assert (event["job"]["namespace"], event["job"]["name"]) == ("flows-test", "tpch")
    start, complete = events
    assert start["inputs"] == [] and start["outputs"] == []

    kafka = f"kafka://{tpch_env['bootstrap'].split(',')[0]}"
    outputs = {d["name"]: d for d in complete["outputs"]}
    assert set(outputs) == {f"{tpch_env['prefix']}{t}" for t in TABLES}
    assert {d["namespace"] for d in outputs.values()} == {kafka}
    inputs = {(d["namespace"], d["name"]) for d in complete["inputs"]}
    assert inputs == {("duckdb://tpch", f"src.{t}") for t in TABLES}

    documents = lineage_documents(tpch_env["bootstrap"], result.commit_id)
    assert set(documents) == {f"tpch.{t}" for t in TABLES}
    for table in TABLES:
        output = outputs[f"{tpch_env['prefix']}{table}"]
        assert (
            output["outputFacets"]["outputStatistics"]["rowCount"] == result.rows[f"tpch.{table}"]
        )
        fields = output["facets"]["columnLineage"]["fields"]
        document = documents[f"tpch.{table}"]
        expected = {
            c["target"]: [("duckdb://tpch", *s.rsplit(".", 1)) for s in c["sources"]]
            for c in document["columns"]
        }
        got = {
            target: [(i["namespace"], i["name"], i["field"]) for i in f["inputFields"]]
            for target, f in fields.items()
        }
        assert got == expected
        subtypes = {
            i["transformations"][0]["subtype"] for f in fields.values() for i in f["inputFields"]
        }
        assert subtypes == {"IDENTITY"}  # SELECT *: every column a copy, as _lineage says


def test_a_failing_load_sends_start_then_fail(tpch_env, monkeypatch, tmp_path):
    monkeypatch.setenv("TPCH_SOURCE_PATH", str(tmp_path / "missing.duckdb"))
    with LineageReceiver().running() as receiver:
        # the client's structured variables, this time
        monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
        monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", receiver.url)
        with pytest.raises(RunFailed) as failed:
            asyncio.run(TpchFlow().run("initial"))

    events = receiver.of_run(failed.value.result.run_id)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    for event in events:
        check_run_event(event)
    error = events[1]["run"]["facets"]["errorMessage"]["message"]
    assert error.startswith("FileNotFoundError: TPC-H source not found")
    assert events[1]["outputs"] == []  # nothing committed


def test_the_kafka_transport_sends_the_events_to_a_topic(
    tpch_env, monkeypatch, tmp_path, new_topic
):
    topic = new_topic()
    monkeypatch.setenv("TPCH_SOURCE_PATH", str(tmp_path / "missing.duckdb"))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "kafka")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TOPIC", topic)
    config = {"bootstrap.servers": tpch_env["bootstrap"], "message.timeout.ms": "10000"}
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__CONFIG", json.dumps(config))
    with pytest.raises(RunFailed) as failed:
        asyncio.run(TpchFlow().run("initial"))

    events = [json.loads(m.value()) for m in consume_all(tpch_env["bootstrap"], topic)]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert {e["run"]["runId"] for e in events} == {failed.value.result.run_id}
    for event in events:
        check_run_event(event)


def test_a_dead_receiver_does_not_fail_the_load(tpch_env, monkeypatch, caplog):
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", closed_port_url())
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TIMEOUT", "2")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY", '{"total": 1, "backoff_factor": 0.1}')
    caplog.set_level(logging.WARNING)

    started = time.monotonic()
    result = asyncio.run(TpchFlow().run("initial"))

    assert result.status == "COMPLETED" and len(result.rows) == len(TABLES)
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "OpenLineage" in r.getMessage()
    ]
    assert [w.split(" failed")[0] for w in warnings] == [
        "OpenLineage START event",
        "OpenLineage COMPLETE event",
    ]
    assert all(f"flow=tpch run_id={result.run_id}" in w for w in warnings)
    assert time.monotonic() - started < 60
