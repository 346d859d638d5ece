"""produce_from_duckdb checks the keys of a keyed table first (issue 24, item 4).

Kafka keeps the last row per key: duplicate keys would collapse silently in the lakehouse.
"""

from __future__ import annotations

import logging

import duckdb
import pytest

from producer_lib.errors import ProduceError, SourceError
from producer_lib.schema import AvroLong, AvroString, KeySchema, RowType, ValueSchema
from tests.support.consume import consume_all
from tests.support.producers import shop_producer

pytestmark = pytest.mark.kafka
log = logging.getLogger("test")


def _schema(*keys: str) -> ValueSchema:
    schema = ValueSchema("ITEMS", "SHOP")
    schema.add_field("ID", AvroLong())
    schema.add_field("PART", AvroString())
    schema.set_primary_keys(*keys)
    return schema


def _con(sql: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(f"create table ITEMS as {sql}")
    return con


DUPLICATES = "select range % 50 as ID, 'p' || (range % 3) as PART from range(100)"


def test_duplicate_keys_fail_before_anything_is_sent(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    with shop_producer(kafka_bootstrap, _con(DUPLICATES)) as producer:
        target = producer.add_target(topic, "ITEMS", KeySchema(_schema("ID")), _schema("ID"))
        with pytest.raises(SourceError, match="50 duplicate key") as info:
            producer.produce_from_duckdb("ITEMS", target, 10, RowType.REPLACE)
    error = info.value
    assert (error.topic, error.table, error.source) == (topic, "SHOP.ITEMS", "ITEMS")
    assert error.key_columns == ("ID",) and error.duplicate_sample[0] == (0, 2)
    assert consume_all(kafka_bootstrap, topic, "read_uncommitted") == []


def test_a_query_is_checked_and_a_compound_key_counts_whole(kafka_bootstrap, new_topic):
    topic = new_topic()
    schema = _schema("ID", "PART")
    with shop_producer(kafka_bootstrap, _con(DUPLICATES)) as producer:
        target = producer.add_target(topic, "ITEMS", KeySchema(schema), schema)
        assert producer.produce_from_duckdb("ITEMS", target, 10, RowType.REPLACE) == 100
        producer.commit()
        doubled = "select * from ITEMS union all select * from ITEMS where ID = 7"
        with pytest.raises(SourceError, match="2 duplicate key") as info:
            producer.produce_from_duckdb(doubled, target, 10, RowType.REPLACE)
    assert info.value.duplicate_sample == [(7, "p0", 2), (7, "p1", 2)]
    assert len(consume_all(kafka_bootstrap, topic)) == 100


def test_null_keys_fail_and_abort_the_open_transaction(kafka_bootstrap, new_topic):
    topic = new_topic()
    con = _con("select range as ID, 'p' as PART from range(10)")
    con.sql("create table NULLS as select null::bigint as ID, 'x' as PART")
    with shop_producer(kafka_bootstrap, con) as producer:
        target = producer.add_target(topic, "ITEMS", KeySchema(_schema("ID")), _schema("ID"))
        producer.produce_from_duckdb("ITEMS", target, 10, RowType.REPLACE)
        with pytest.raises(SourceError, match="1 row.*null key") as info:
            producer.produce_from_duckdb("NULLS", target, 10, RowType.REPLACE)
        assert info.value.null_sample == [(None,)]
        with pytest.raises(ProduceError, match="earlier error aborted"):
            producer.commit()
        producer.abort()
    assert consume_all(kafka_bootstrap, topic) == []


def test_opting_out_and_append_only_tables_send_every_row(kafka_bootstrap, new_topic):
    topic, log_topic = new_topic(), new_topic(suffix="_log")
    with shop_producer(kafka_bootstrap, _con(DUPLICATES)) as producer:
        keyed = producer.add_target(topic, "ITEMS", KeySchema(_schema("ID")), _schema("ID"))
        appended = producer.add_target(log_topic, "ITEMS", KeySchema(_schema()), _schema())
        producer.produce_from_duckdb("ITEMS", keyed, 10, RowType.REPLACE, check_keys=False)
        producer.produce_from_duckdb("ITEMS", appended, 10, RowType.INSERT)
        producer.commit()
    assert len(consume_all(kafka_bootstrap, topic)) == 100
    assert len(consume_all(kafka_bootstrap, log_topic)) == 100
