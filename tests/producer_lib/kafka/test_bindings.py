"""Tables are keyed by schema name: two topics of one name must not clash (no broker)."""

from __future__ import annotations

import json
import logging

import pytest

from producer_lib.errors import SchemaError
from producer_lib.kafka.bindings import TableBindings
from producer_lib.schema import AvroInt, AvroLong, AvroString, ValueSchema, schema_fingerprint
from producer_lib.schema.catalog_records import CatalogRecord


def _schema(id_type, name: str = "ORDERS") -> ValueSchema:
    schema = ValueSchema(name, "SHOP")
    schema.add_field("ID", id_type, nullable=False)
    schema.add_field("NOTE", AvroString())
    return schema


def _record(topic: str, schema: ValueSchema, kind: str = "value") -> CatalogRecord:
    avro = schema.to_avro_json()
    fp = schema_fingerprint(avro).hex()
    return CatalogRecord(fp, json.dumps(avro), topic, kind, f"{topic}-{kind}")


def test_clashing_column_type_on_another_topic_is_refused_naming_both_topics_and_the_column():
    bindings = TableBindings()
    bindings.add(_record("orders_eu", _schema(AvroLong())))
    with pytest.raises(SchemaError) as caught:
        bindings.check("orders_us", _schema(AvroString()), {"orders_eu", "orders_us"})
    error = caught.value
    assert (error.table, error.topic, error.other_topic, error.column) == (
        "SHOP.ORDERS",
        "orders_us",
        "orders_eu",
        "ID",
    )
    assert (error.type, error.other_type) == ("STRING", "BIGINT")
    assert "keys tables by schema name" in str(error)


def test_mergeable_types_on_another_topic_are_a_warning(caplog):
    bindings = TableBindings()
    bindings.add(_record("orders_eu", _schema(AvroLong())))
    with caplog.at_level(logging.WARNING):
        bindings.check("orders_us", _schema(AvroInt()), {"orders_eu", "orders_us"})
        bindings.check("orders_us", _schema(AvroInt()), {"orders_eu", "orders_us"})
    warnings = [r.getMessage() for r in caplog.records if "topics share a table" in r.message]
    assert len(warnings) == 1  # once per topic
    assert "table=SHOP.ORDERS topic=orders_us other_topics=orders_eu" in warnings[0]


@pytest.mark.parametrize(
    ("records", "existing"),
    [
        pytest.param([("orders_eu", "ORDERS", "value")], set(), id="other-topic-deleted"),
        pytest.param([("orders_eu", "INVOICES", "value")], {"orders_eu"}, id="other-name"),
        pytest.param([("orders_eu", "ORDERS", "key")], {"orders_eu"}, id="key-schema"),
        pytest.param([("orders_us", "ORDERS", "value")], {"orders_us"}, id="same-topic"),
    ],
)
def test_no_clash_without_another_existing_topic_of_the_name(records, existing):
    bindings = TableBindings()
    for topic, name, kind in records:
        bindings.add(_record(topic, _schema(AvroLong(), name), kind))
    bindings.check("orders_us", _schema(AvroString()), existing)


def test_a_topics_latest_value_schema_is_what_binds_it():
    bindings = TableBindings()
    bindings.add(_record("orders_eu", _schema(AvroLong())))
    bindings.add(_record("orders_eu", _schema(AvroString())))  # the topic evolved
    bindings.check("orders_us", _schema(AvroString()), {"orders_eu"})
    assert bindings.topics_of("SHOP.ORDERS") == ["orders_eu"]
