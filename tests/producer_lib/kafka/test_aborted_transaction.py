"""A transaction aborted by an error stays aborted until the flow says so (issue 24, item 2).

A flow that catches a produce error and goes on must not commit the rows after the error
alone: the TRUNCATE and the rows before it were aborted with the transaction.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import suppress

import duckdb
import pytest

from producer_lib import FunctionRunner, RunFailed, SourceAdapter
from producer_lib.errors import EncodeError, ProduceError
from producer_lib.kafka import KafkaProducer, Target
from producer_lib.schema import (
    AvroLong,
    AvroVarchar,
    KeySchema,
    RowType,
    ValueSchema,
    create_key_row,
    create_truncate_row,
)
from producer_lib.settings import KafkaSettings
from tests.support.consume import consume_all
from tests.support.producers import shop_producer

pytestmark = pytest.mark.kafka
log = logging.getLogger("test")


def _schema() -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("CODE", AvroVarchar(8))
    schema.add_primary_key("ID")
    return schema


def _con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(
        "create table ORDERS as select range::bigint as ID, 'C' || range as CODE from range(20)"
    )
    return con


def _truncate_and_rows(producer: KafkaProducer, target: Target) -> None:
    truncate = create_truncate_row(target.value_schema, None)
    producer.produce_row(
        target, create_key_row(truncate, target.key_schema), truncate, RowType.TRUNCATE, partition=0
    )
    producer.produce_from_duckdb("select * from ORDERS where ID < 10", target, 100, RowType.REPLACE)


def _bad_row(producer: KafkaProducer, target: Target) -> None:
    producer.produce_row(target, {"ID": 99}, {"ID": 99, "CODE": "Ç-not-ascii"}, RowType.REPLACE)


def test_a_caught_error_makes_produce_and_commit_refuse(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    with shop_producer(kafka_bootstrap, _con()) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        _truncate_and_rows(producer, target)
        with pytest.raises(EncodeError):
            _bad_row(producer, target)
        with pytest.raises(ProduceError, match="earlier error aborted") as refused:
            producer.produce_from_duckdb(
                "select * from ORDERS where ID >= 10", target, 100, RowType.REPLACE
            )
        assert "EncodeError" in str(refused.value)
        assert (refused.value.topic, refused.value.table) == (topic, "SHOP.ORDERS")
        with pytest.raises(ProduceError, match="EncodeError.*Call producer.abort"):
            producer.commit()
        with pytest.raises(ProduceError, match="earlier error aborted"):
            _truncate_and_rows(producer, target)
        producer.abort()  # acknowledged: the with block ends without an error
    assert consume_all(kafka_bootstrap, topic) == []


def test_abort_then_retry_commits_the_whole_set(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    with shop_producer(kafka_bootstrap, _con()) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        _truncate_and_rows(producer, target)
        with pytest.raises(EncodeError):
            _bad_row(producer, target)
        producer.abort()
        _truncate_and_rows(producer, target)
        producer.produce_from_duckdb(
            "select * from ORDERS where ID >= 10", target, 100, RowType.REPLACE
        )
        assert producer.commit() is not None
    messages = consume_all(kafka_bootstrap, topic)
    assert len(messages) == 21  # TRUNCATE + 20 rows, once


def test_leaving_the_with_block_after_a_caught_error_logs_it(kafka_bootstrap, new_topic, caplog):
    topic = new_topic()
    with shop_producer(kafka_bootstrap, _con()) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        _truncate_and_rows(producer, target)
        with suppress(EncodeError):
            _bad_row(producer, target)
    assert "no abort() followed" in caplog.text and "EncodeError" in caplog.text
    assert consume_all(kafka_bootstrap, topic) == []


def test_an_error_without_an_open_transaction_leaves_the_producer_usable(
    kafka_bootstrap, new_topic
):
    topic = new_topic()
    with shop_producer(kafka_bootstrap, _con()) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        with pytest.raises(EncodeError):
            _bad_row(producer, target)  # its own transaction: nothing else was lost
        producer.produce_from_duckdb("ORDERS", target, 100, RowType.REPLACE)
        producer.commit()
    assert len(consume_all(kafka_bootstrap, topic)) == 20


class _SwallowingFlow(FunctionRunner):
    """A flow that catches every produce error and goes on, pointer and commit included."""

    source_system = "SHOPDB"

    def __init__(self, topic: str) -> None:
        super().__init__(f"swallow_{uuid.uuid4().hex[:8]}", log)
        self.topic = topic

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        target = producer.add_target(self.topic, "ORDERS", KeySchema(_schema()), _schema())
        _truncate_and_rows(producer, target)
        with suppress(EncodeError):
            _bad_row(producer, target)
        with suppress(ProduceError):
            producer.produce_from_duckdb(
                "select * from ORDERS where ID >= 10", target, 100, RowType.REPLACE
            )
        self.set_delta_pointer(19)
        with suppress(ProduceError):
            producer.commit()


def test_a_flow_that_swallows_the_error_fails_its_run_and_keeps_the_pointer(
    kafka_bootstrap, new_topic
):
    topic = new_topic()
    flow = _SwallowingFlow(topic)
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    producer = KafkaProducer(
        "SHOPDB", flow.function_name, "bronze", "test", settings, log, duckdb_connection=_con()
    )
    with pytest.raises(RunFailed, match="earlier error aborted") as failed:
        asyncio.run(flow.run("initial", producer))
    assert failed.value.result.status == "FAILED"
    assert failed.value.result.delta_pointer is None and failed.value.result.commit_ids == ()
    assert consume_all(kafka_bootstrap, topic) == []
