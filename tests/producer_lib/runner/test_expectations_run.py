"""Expectations in a run, against the real broker: warn produces, drop sends the rows to
``_rejected_rows``, fail publishes nothing; every run reports its counts on ``_execution_log``."""

from __future__ import annotations

import asyncio
import json
import uuid

import duckdb
import pytest

from producer_lib import FunctionRunner, KafkaProducer, KeySchema, RowType, SourceAdapter
from producer_lib.errors import ExpectationFailed, SchemaError
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC, REJECTED_ROWS_TOPIC
from producer_lib.runner import RunFailed
from producer_lib.schema import AvroDecimal, AvroLong, AvroString, ValueSchema
from producer_lib.settings import KafkaSettings
from tests.support.consume import consume_all
from tests.support.decode import decoded_values

pytestmark = pytest.mark.kafka

# 10 orders; ids 3 and 7 have a negative amount, id 5 an unknown status.
ORDERS_SQL = """select range::BIGINT as ID,
    (case when range in (3, 7) then -range else range * 10 end)::DECIMAL(10,2) as AMOUNT,
    case when range = 5 then 'lost' else 'open' end as STATUS
    from range(10)"""


class OrdersFlow(FunctionRunner):
    """Stages ORDERS in its own DuckDB database and exports it with the given expectations."""

    source_system = "SHOP"

    def __init__(self, function: str, topic: str, declare) -> None:
        super().__init__(function)
        self.topic, self.declare = topic, declare
        self.connection = duckdb.connect()
        self.connection.execute(f"create table ORDERS as {ORDERS_SQL}")

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        schema = ValueSchema("ORDERS", "SHOP")
        schema.add_field("ID", AvroLong(), nullable=False)
        schema.add_field("AMOUNT", AvroDecimal(10, 2))
        schema.add_field("STATUS", AvroString())
        schema.pks = ["ID"]
        self.declare(schema)
        target = producer.add_target(self.topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("ORDERS", target, 4, RowType.REPLACE)
        producer.commit()


@pytest.fixture
def flow(kafka_bootstrap, new_topic, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    topic, function = new_topic(partitions=2), f"orders_{uuid.uuid4().hex[:8]}"

    def run(declare):
        runner = OrdersFlow(function, topic, declare)
        producer = KafkaProducer(
            "SHOP",
            function,
            "bronze",
            "test",
            KafkaSettings.from_env(),
            duckdb_connection=runner.connection,  # the flow's own staging database
        )
        return asyncio.run(runner.run("initial", producer))

    return {"run": run, "topic": topic, "function": function, "bootstrap": kafka_bootstrap}


def last_record(flow) -> dict:
    key = f"{flow['function']}|default|0".encode()
    records = consume_all(flow["bootstrap"], EXECUTION_LOG_TOPIC)
    return [json.loads(m.value()) for m in records if m.key() == key][-1]


def ids(flow) -> list[int]:
    return sorted(v["ID"] for v in decoded_values(flow["bootstrap"], flow["topic"]))


def test_warn_produces_every_row_and_reports_the_failures(flow) -> None:
    def declare(schema):
        schema.expect('"AMOUNT" >= 0', name="amount_positive", action="warn")
        schema.expect_column("STATUS", in_set=["open", "closed"], action="warn", name="status")

    result = flow["run"](declare)
    assert ids(flow) == list(range(10))
    report = {
        "rows_checked": 10,
        "expectations": {
            "amount_positive": {"action": "warn", "failed": 2},
            "status": {"action": "warn", "failed": 1},
        },
    }
    assert result.expectations == {"SHOP.ORDERS": report}
    record = last_record(flow)
    assert record["status"] == "COMPLETED" and record["expectations"] == {"SHOP.ORDERS": report}


@pytest.mark.slow  # 6 s: keeps the fast suite under 5 minutes
def test_drop_sends_the_failing_rows_to_rejected_rows_in_the_same_transaction(flow) -> None:
    def declare(schema):
        schema.expect('"AMOUNT" >= 0', name="amount_positive", action="drop")

    result = flow["run"](declare)
    assert ids(flow) == [0, 1, 2, 4, 5, 6, 8, 9]
    assert result.rows == {"SHOP.ORDERS": 8, "_rejected": 2}
    rejected = [
        m
        for m in consume_all(flow["bootstrap"], REJECTED_ROWS_TOPIC)
        if dict(m.headers())["flow.function"] == flow["function"].encode()
    ]
    assert len(rejected) == 2
    headers = dict(rejected[0].headers())
    assert headers["flow.topic"] == flow["topic"].encode()
    assert headers["flow.table"] == b"SHOP.ORDERS"
    assert headers["flow.expectations"] == b"amount_positive"
    assert headers["flow.reason"] == b'amount_positive: "AMOUNT" >= 0'
    # framed and encoded as the data topic carries rows: the same catalog decodes them
    values = decoded_values(flow["bootstrap"], REJECTED_ROWS_TOPIC)
    change_time = decoded_values(flow["bootstrap"], flow["topic"])[0]["__change_time"]
    mine = [v for v in values if v["__change_time"] == change_time]  # the data's transaction
    assert sorted((v["ID"], str(v["AMOUNT"])) for v in mine) == [(3, "-3.00"), (7, "-7.00")]
    commit = json.loads(
        [
            m
            for m in consume_all(flow["bootstrap"], "_commits")
            if m.key() == result.commit_id.encode()
        ][0].value()
    )
    assert {"topic": REJECTED_ROWS_TOPIC, "table": "_rejected", "rows": 2} in commit["tables"]
    assert last_record(flow)["expectations"]["SHOP.ORDERS"]["expectations"] == {
        "amount_positive": {"action": "drop", "failed": 2}
    }


def test_fail_publishes_nothing_and_the_failed_record_says_which(flow) -> None:
    def declare(schema):
        schema.expect('"AMOUNT" >= 0', name="amount_positive", action="warn")
        schema.expect_column("STATUS", in_set=["open"], name="status_known")  # action: fail

    with pytest.raises(RunFailed) as failed:
        flow["run"](declare)
    cause = failed.value.__cause__
    assert isinstance(cause, ExpectationFailed)
    assert cause.context["expectation"] == "status_known" and cause.context["failed_rows"] == 1
    assert cause.context["flow"] == flow["function"] and cause.context["table"] == "SHOP.ORDERS"
    assert consume_all(flow["bootstrap"], flow["topic"]) == []
    record = last_record(flow)
    assert record["status"] == "FAILED" and "status_known" in record["error"]
    assert record["expectations"]["SHOP.ORDERS"] == {
        "rows_checked": 10,
        "expectations": {
            "amount_positive": {"action": "warn", "failed": 2},
            "status_known": {"action": "fail", "failed": 1},
        },
    }


def test_a_bad_predicate_fails_the_run_naming_flow_table_and_expectation(flow) -> None:
    def declare(schema):
        schema.expect('"AMOUNT" >= 0', name="amount_positive")
        schema.expect("AMOUNT >= 'zero'", name="amount_typed_wrong")

    with pytest.raises(RunFailed) as failed:
        flow["run"](declare)
    cause = failed.value.__cause__
    assert isinstance(cause, SchemaError)
    assert cause.context == {
        "flow": flow["function"],
        "table": "SHOP.ORDERS",
        "expectation": "amount_typed_wrong",
        "sql": "AMOUNT >= 'zero'",
    }
    assert consume_all(flow["bootstrap"], flow["topic"]) == []
