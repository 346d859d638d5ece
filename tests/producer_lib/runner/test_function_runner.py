"""FunctionRunner against the real broker: runs, the execution log and the delta pointer."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from producer_lib import RunFailed
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC, LINEAGE_TOPIC
from tests.support.consume import consume_all
from tests.support.runner_flows import NumbersFlow

pytestmark = pytest.mark.kafka


@pytest.fixture
def flow_env(monkeypatch, kafka_bootstrap, new_topic):
    """Environment of one NumbersFlow: its own function name and data topic."""
    topic = new_topic(partitions=2)
    function = f"numbers_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("RUNNER_TEST_FUNCTION", function)
    monkeypatch.setenv("RUNNER_TEST_TOPIC", topic)
    return {"topic": topic, "function": function, "bootstrap": kafka_bootstrap}


def log_records(bootstrap: str, function: str, dataflow: str = "default") -> list[dict]:
    key = f"{function}|{dataflow}|0".encode()
    return [
        json.loads(m.value()) for m in consume_all(bootstrap, EXECUTION_LOG_TOPIC) if m.key() == key
    ]


def run(load: str, **kw) -> object:
    return asyncio.run(NumbersFlow().run(load, **kw))


def data_rows(bootstrap: str, topic: str) -> int:
    return len(consume_all(bootstrap, topic))


def test_initial_then_delta_moves_the_pointer_with_the_data(flow_env):
    first = run("initial")
    assert first.status == "COMPLETED"
    assert first.rows == {"TEST.NUMBERS": 11}  # TRUNCATE + 10 REPLACE rows
    assert first.delta_pointer == 9 and first.commit_id is not None

    second = run("delta")
    assert second.delta_pointer == 14 and second.rows == {"TEST.NUMBERS": 5}
    assert data_rows(flow_env["bootstrap"], flow_env["topic"]) == 16

    records = log_records(flow_env["bootstrap"], flow_env["function"])
    assert [(r["status"], r["load"], r["delta_pointer"]) for r in records] == [
        ("STARTED", "initial", None),
        ("COMPLETED", "initial", 9),
        ("STARTED", "delta", 9),
        ("COMPLETED", "delta", 14),
    ]
    completed = records[3]
    assert completed["commit_id"] == second.commit_id
    assert completed["rows"] == {"TEST.NUMBERS": 5}
    assert completed["run_id"] == second.run_id and completed["finished_at"]


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_completed_record_is_in_the_data_transaction(flow_env):
    run("initial")
    committed = consume_all(flow_env["bootstrap"], "_commits")
    commit = run("delta").commit_id
    assert any(m.key() == commit.encode() for m in consume_all(flow_env["bootstrap"], "_commits"))
    assert len(committed) >= 1
    # the COMPLETED record and the lineage document carry the commit id of the data commit
    lineage = [
        json.loads(m.value())
        for m in consume_all(flow_env["bootstrap"], LINEAGE_TOPIC)
        if json.loads(m.value()).get("commit_id") == commit
    ]
    assert [d["target"] for d in lineage] == ["TEST.NUMBERS"]
    assert {c["target"]: c["kind"] for c in lineage[0]["columns"]} == {"ID": "copy", "NAME": "copy"}
    assert lineage[0]["sources"] == [f"SRC_{flow_env['function']}"]


@pytest.mark.slow
def test_failed_run_leaves_pointer_and_data_unchanged(flow_env, monkeypatch):
    run("initial")
    monkeypatch.setenv("RUNNER_TEST_FAIL", "after_produce")
    with pytest.raises(RunFailed, match="source went away") as failed:
        run("delta")
    assert failed.value.result.status == "FAILED"
    assert failed.value.result.delta_pointer == 9
    assert data_rows(flow_env["bootstrap"], flow_env["topic"]) == 11  # the 5 rows were aborted

    last = log_records(flow_env["bootstrap"], flow_env["function"])[-1]
    assert (last["status"], last["delta_pointer"]) == ("FAILED", 9)
    assert "RuntimeError: source went away" in last["error"]

    monkeypatch.delenv("RUNNER_TEST_FAIL")
    assert run("delta").delta_pointer == 14  # the rerun starts where the pointer was


def test_a_load_that_forgets_to_commit_fails_and_publishes_nothing(flow_env, monkeypatch):
    run("initial")
    monkeypatch.setenv("RUNNER_TEST_FAIL", "no_commit")
    with pytest.raises(RunFailed, match="did not commit"):
        run("delta")
    assert data_rows(flow_env["bootstrap"], flow_env["topic"]) == 11


def test_a_run_without_data_can_still_move_the_pointer(flow_env, monkeypatch):
    run("initial")
    monkeypatch.setenv("RUNNER_TEST_FAIL", "pointer_only")
    result = run("delta")
    assert (result.status, result.delta_pointer, result.commit_id) == ("COMPLETED", 109, None)
    assert log_records(flow_env["bootstrap"], flow_env["function"])[-1]["delta_pointer"] == 109


@pytest.mark.slow
def test_dataflows_have_their_own_pointer(flow_env):
    run("initial", dataflow="eu")
    assert run("delta", dataflow="eu").delta_pointer == 14
    run("initial", dataflow="us")
    assert run("delta", dataflow="us").delta_pointer == 14  # from 9, not from eu's 14
    assert [
        r["delta_pointer"]
        for r in log_records(flow_env["bootstrap"], flow_env["function"], dataflow="eu")
    ] == [None, 9, 9, 14]
    assert log_records(flow_env["bootstrap"], flow_env["function"]) == []


def test_bad_load_kind_is_refused_before_anything_runs(flow_env):
    from producer_lib.errors import ConfigError

    with pytest.raises(ConfigError, match="load must be one of initial, delta"):
        run("full")
    with pytest.raises(ConfigError, match="dataflow"):
        run("initial", dataflow="a|b")
    assert log_records(flow_env["bootstrap"], flow_env["function"]) == []


def test_get_delta_pointer_outside_a_run_is_an_error(flow_env):
    from producer_lib.errors import ProducerLibError

    with pytest.raises(ProducerLibError, match="no run in progress"):
        NumbersFlow().get_delta_pointer()


def test_producing_no_rows_opens_no_transaction(flow_env):
    import duckdb

    from producer_lib import KafkaProducer, KafkaSettings, KeySchema, RowType, ValueSchema
    from producer_lib.schema import AvroLong

    schema = ValueSchema("EMPTY", "TEST")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_primary_key("ID")
    duckdb.execute("CREATE OR REPLACE TABLE empty_source (ID BIGINT NOT NULL)")
    with KafkaProducer("TEST", flow_env["function"], "bronze", "dev", KafkaSettings()) as producer:
        target = producer.add_target(flow_env["topic"], "EMPTY", KeySchema(schema), schema)
        assert producer.produce_from_duckdb("empty_source", target, 100, RowType.UPSERT) == 0
        assert not producer.has_open_transaction
        assert producer.commit() is None  # nothing to commit: no empty transaction
