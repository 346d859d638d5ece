"""Opt-in truncation is never silent: counted per column in the commit record and log.

Issue 24, item 3: text longer than its declared length fails the export by default; a flow
that opts in to truncation sees every cut value counted, per table and column, in the
``_commits`` record, the run result and a log line. An aborted transaction counts nothing.
"""

from __future__ import annotations

import json
import logging

import duckdb
import pytest

from producer_lib.errors import EncodeError
from producer_lib.schema import AvroLong, AvroNVarchar, KeySchema, RowType, ValueSchema
from tests.support.consume import consume_all
from tests.support.producers import ENCODINGS, encoding_settings, shop_producer

pytestmark = pytest.mark.kafka
log = logging.getLogger("test")


def _schema(truncate: bool) -> ValueSchema:
    schema = ValueSchema("NOTES", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("TEXT", AvroNVarchar(4, truncate=truncate))
    schema.add_primary_key("ID")
    return schema


def _con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(
        "create table NOTES as select * from (values (1, 'ok'), (2, 'much too long'), "
        "(3, 'five!'), (4, null)) t(ID, TEXT)"
    )
    return con


def _commit_record(bootstrap: str, commit_id: str) -> dict:
    records = [json.loads(m.value()) for m in consume_all(bootstrap, "_commits")]
    return next(r for r in records if r["commit_id"] == commit_id)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_overlong_text_fails_by_default(kafka_bootstrap, new_topic, encoding):
    con = _con()
    with shop_producer(encoding_settings(kafka_bootstrap, encoding), con) as producer:
        schema = _schema(truncate=False)
        target = producer.add_target(new_topic(), "NOTES", KeySchema(schema), schema)
        with pytest.raises(EncodeError, match="TEXT") as error:
            producer.produce_from_duckdb("NOTES", target, 10, RowType.UPSERT)
        assert error.value.context["row"] == 1  # the second row, 'much too long'


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_truncated_values_are_counted_in_the_commit_record_and_log(
    kafka_bootstrap, new_topic, caplog, encoding
):
    con = _con()
    caplog.set_level(logging.WARNING)
    with shop_producer(encoding_settings(kafka_bootstrap, encoding), con) as producer:
        schema = _schema(truncate=True)
        target = producer.add_target(new_topic(), "NOTES", KeySchema(schema), schema)
        producer.produce_from_duckdb("NOTES", target, 10, RowType.UPSERT)
        commit_id = producer.commit()
        producer.produce_from_duckdb("NOTES", target, 10, RowType.UPSERT)
        producer.abort()  # the aborted transaction's cuts are dropped with it
        producer.produce_from_duckdb("select * from NOTES where ID = 1", target, 10, RowType.UPSERT)
        clean_commit = producer.commit()
    assert commit_id is not None and clean_commit is not None
    assert _commit_record(kafka_bootstrap, commit_id)["truncated"] == {"SHOP.NOTES": {"TEXT": 2}}
    assert "truncated" not in _commit_record(kafka_bootstrap, clean_commit)
    warnings = [r.getMessage() for r in caplog.records if "text truncated" in r.getMessage()]
    assert len(warnings) == 1 and "SHOP.NOTES" in warnings[0] and "'TEXT': 2" in warnings[0]
