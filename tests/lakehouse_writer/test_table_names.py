"""Table names the lakehouse cannot hold: refused by the producer, stopped alone by the writer.

Issue "silent damage", items 5, 6 and 10: a namespace named like the writer's own tables
(``_writer_state``) nested a user table inside them, where maintenance never looked but
vacuumed; a 300-character name passed the producer and then failed the whole writer on every
restart; ``a.b`` + ``c`` and ``a`` + ``b.c`` were two tables with one name.
"""

from __future__ import annotations

import pytest

from lakehouse_writer.cli import main
from producer_lib.errors import SchemaError
from producer_lib.schema import AvroLong, AvroNVarchar, KeySchema, ValueSchema
from producer_lib.schema.names import path_segment, table_name_problem
from tests.support.producers import shop_producer
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas

LONG = "表" * 86  # 258 bytes as UTF-8: one more character than a path segment holds


@pytest.mark.parametrize(
    ("namespace", "name", "problem"),
    [
        ("_writer_state", "x", "reserved"),
        ("_commits", "x", "reserved"),
        ("SHOP", "b.c", "dot"),
        ("SHOP", LONG, "258 bytes"),
        ("SHOP", "x" * 256, "256 bytes"),
        ("SHOP", "/" * 86, "258 bytes"),  # escaped as ~2F: three bytes each
        (LONG, "x", "namespace takes 258 bytes"),
    ],
    ids=["writer-state", "commits", "dotted-name", "cjk-86", "ascii-256", "escapes", "namespace"],
)
def test_names_the_lakehouse_cannot_hold_are_named(namespace, name, problem):
    found = table_name_problem(namespace, name)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("a.b", "c"), ("SHOP", "_staging"), ("SAP BW", "/BIC/AZSALES"), ("SHOP", "表" * 85)],
    ids=["dotted-namespace", "underscore-table", "escaped", "cjk-85"],
)
def test_names_the_lakehouse_holds(namespace, name):
    assert table_name_problem(namespace, name) is None
    assert len(path_segment(name).encode()) <= 255


def _schema(name: str, namespace: str) -> ValueSchema:
    schema = ValueSchema(name, namespace)
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_primary_key("ID")
    return schema


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("namespace", "name"),
    [("_writer_state", "x"), ("a", "b.c"), ("SHOP", "T" * 300)],
    ids=["reserved", "dotted", "too-long"],
)
def test_the_producer_refuses_such_a_table_before_a_row_is_sent(
    kafka_bootstrap, new_topic, namespace, name
):
    schema = _schema(name, namespace)
    topic = new_topic()
    with shop_producer(kafka_bootstrap) as producer, pytest.raises(SchemaError) as raised:
        producer.add_target(topic, "x", KeySchema(schema), schema)
    assert topic in str(raised.value) and f"{namespace}.{name}"[:300] in str(raised.value)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_the_writer_stops_only_such_tables_and_applies_the_others(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, capsys, request
):
    """Rows of such names (from another producer) stop their table; the batch goes on."""
    schemas_topic = new_topic(suffix="_schemas")
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas_topic)
    tables = {
        "good": _schema("ORDERS", "SHOP"),
        "reserved": _schema("x", "_writer_state"),
        "dotted": _schema("b.c", "a"),
        "long": _schema(LONG, "SHOP"),
    }
    rows = [{"ID": 1, "NAME": "n", "__change_type": "A", "__change_time": T0 + 1}]
    for label, schema in tables.items():
        topic = new_topic(suffix=f"_{label}")  # t_<test name>_<label>_<8 hex>
        publish_schemas(kafka_bootstrap, topic, schemas_topic, schema)
        produce_transaction(kafka_bootstrap, topic, schema, rows)
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    ours = f"t_{request.node.name}_(good|reserved|dotted|long)_.{{8}}"
    argv = once_argv(lake, checkpoint, ours, kafka_bootstrap)
    assert main(argv) == 0
    assert spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS")).count() == 1
    assert not (lake / "_writer_state" / "x").exists()  # nothing nested in the writer's state
    assert not (lake / "a" / "b.c").exists()
    capsys.readouterr()
    assert main(["status", "--lakehouse", str(lake), "--checkpoint", str(checkpoint)]) == 1
    report = capsys.readouterr().out
    assert "_writer_state.x: " in report and "reserved" in report
    assert "a.b.c: " in report and "dot" in report
    assert "258 bytes" in report
