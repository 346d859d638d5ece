"""Kafka message keys: decoded by the writer and checked against the key fields of the value.

Real broker, real Spark and Delta, ``lakehouse-writer run --once``. A key that disagrees with
its value, does not decode, has no known schema, or is missing for a keyed table sends its
row to ``_rejected`` with a reason naming the table, the key field, both values and where the
row was read; the batch's other rows apply. Rows whose keys agree apply as before, every row
type of a keyed table and an append-only table's transaction-time keys alike.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lakehouse_writer.cli import main
from lakehouse_writer.read import driver_decode
from lakehouse_writer.read.catalog import CatalogEntry
from lakehouse_writer.read.keys import KeySchemaRef, own_key
from lakehouse_writer.read.scan import ExpectedSchemas
from producer_lib.schema import (
    AvroNVarchar,
    KeySchema,
    ValueSchema,
    schema_fingerprint,
    single_object_header,
)
from tests.support.writer import T0, encode_row, framed, once_argv, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

Message = tuple[bytes | None, bytes]  # (key, value) as sent


def _send(bootstrap: str, topic: str, messages: Sequence[Message]) -> None:
    """``messages`` in one committed transaction, on partition 0, in order."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in messages:
        producer.produce(topic, key=key, value=value, partition=0)
    producer.flush(30)
    producer.commit_transaction(30)


def _row(i: int, change: str = "I", t: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "ID": i,
        "NAME": f"n{i}",
        "REGION": "A",
        "__change_type": change,
        "__change_time": T0 + t,
        **more,
    }


def _run(lake: Path, ckpt: Path, topic: str, bootstrap: str, max_offsets: int | None) -> None:
    argv = once_argv(lake, ckpt, topic, bootstrap)
    if max_offsets:
        argv += ["--max-offsets-per-trigger", str(max_offsets)]
    assert main(argv) == 0


def _rejected(spark: Any, lake: Path) -> dict[int, Any]:
    """``_rejected`` rows by offset (none: empty)."""
    if not (lake / "_rejected").exists():
        return {}
    rows = spark.read.format("delta").load(str(lake / "_rejected")).collect()
    return {r.offset: r for r in rows}


def _ids(spark: Any, lake: Path, table: str = "ORDERS") -> list[tuple]:
    rows = spark.read.format("delta").load(str(lake / "SHOP" / table)).collect()
    return sorted((r.ID, r.NAME) for r in rows)


def _key_of(schema: Any, row: Mapping[str, Any]) -> bytes:
    """The framed key of ``row`` (its key fields as given, whatever the value holds)."""
    key_schema = KeySchema(schema)
    return framed(key_schema.to_avro_json(), {f.avro_name: row[f.name] for f in key_schema.fields})


@pytest.fixture
def setup(kafka_bootstrap, new_topic, tmp_path, monkeypatch):
    """(topic, lake, checkpoint) with the catalog topic set for the writer."""
    topic, schemas = new_topic(partitions=1), new_topic(suffix="_schemas")
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    return topic, schemas, tmp_path / "lake", tmp_path / "ckpt"


def test_the_scan_knows_the_key_schema_the_producer_writes_without_the_catalog():
    schema = sample_schema()
    rebuilt = ValueSchema.from_avro_json(json.dumps(schema.to_avro_json()))  # as the writer has it
    published = single_object_header(schema_fingerprint(KeySchema(schema).to_avro_json()))
    own = own_key(rebuilt)
    assert own is not None and own.header == published  # the scan checks keys in its own pass


def test_the_scan_also_checks_keys_of_the_schemas_the_last_batch_found_on_the_catalog():
    schema = sample_schema()
    entry = CatalogEntry(json.dumps(schema.to_avro_json()), "value", "orders")
    registry_key = KeySchemaRef(
        b"\x00\x00\x00\x00\x2a", json.dumps(KeySchema(schema).to_avro_json())
    )
    own = own_key(schema)
    expected = ExpectedSchemas()
    expected.saw(b"\x00\x00\x00\x00\x29", entry)
    assert expected.guess()[0].keys == (own,)  # a Confluent key is not known yet
    expected.saw(b"\x00\x00\x00\x00\x29", entry, (registry_key,))
    assert expected.guess()[0].keys == (own, registry_key)
    expected.saw(b"\x00\x00\x00\x00\x29", entry)  # a batch that found none keeps them
    assert expected.guess()[0].keys == (own, registry_key)


@pytest.mark.parametrize("path", ["scanned", "decoded-after", "small-table", "small-columns"])
def test_a_key_that_disagrees_is_rejected_with_its_reason_and_the_rest_applies(
    spark, kafka_bootstrap, setup, monkeypatch, caplog, path
):
    """``scanned``: the value schema is expected (decoded while the batch is read);
    ``decoded-after``: a newer schema is the latest, so the rows are decoded after the scan;
    ``small-table``: the driver's decode (:mod:`lakehouse_writer.read.driver_decode`) finds
    the key, leaves the table to
    Spark's, which rejects the row; ``small-columns``: the same, with the rows decoded into columns
    by DuckDB."""
    topic, schemas, lake, ckpt = setup
    small = path.startswith("small-")
    if not small:  # a few rows: the scan decodes them only with it off
        monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", "0")
    if path == "small-columns":
        monkeypatch.setattr(driver_decode, "COLUMNS_FROM_ROWS", 0)
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    if path == "decoded-after":
        newer = sample_schema()
        newer.add_field("NOTE", AvroNVarchar(10))
        publish_schemas(kafka_bootstrap, topic, schemas, newer)
    good = [encode_row(schema, _row(i)) for i in (1, 2, 3)]
    liar = _row(5)
    bad = (_key_of(schema, {**liar, "ID": 6}), encode_row(schema, liar)[1])
    _send(kafka_bootstrap, topic, [good[0], good[1], bad, good[2]])

    with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
        _run(lake, ckpt, topic, kafka_bootstrap, None)

    left = "reason=a Kafka key disagrees with its value (partition 0, offset 2)"
    assert (left in caplog.text) == small
    assert _ids(spark, lake) == [(1, "n1"), (2, "n2"), (3, "n3")]
    rejected = _rejected(spark, lake)
    assert list(rejected) == [2]
    row = rejected[2]
    assert row.error == (
        "Kafka key disagrees with the value: table SHOP.ORDERS, key field ID: key 6, "
        f"value 5 (topic {topic}, partition 0, offset 2)"
    )
    assert (row.table, row.topic, row.partition) == ("SHOP.ORDERS", topic, 0)
    assert (bytes(row.key), bytes(row.value)) == bad  # the bytes as sent


def test_keys_that_do_not_decode_are_unknown_or_missing_are_rejected_each_with_its_reason(
    spark, kafka_bootstrap, setup
):
    topic, schemas, lake, ckpt = setup
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    key_header = single_object_header(schema_fingerprint(KeySchema(schema).to_avro_json()))
    value_header = single_object_header(schema_fingerprint(schema.to_avro_json()))
    value = {i: encode_row(schema, _row(i))[1] for i in range(1, 7)}
    _send(
        kafka_bootstrap,
        topic,
        [
            encode_row(schema, _row(1)),
            (key_header, value[2]),  # the key schema's header, no body: does not decode
            (b"\xc3\x01" + b"\x07" * 8 + b"\x06", value[3]),  # a fingerprint nobody registered
            (b"3", value[4]),  # no header
            (None, value[5]),  # no key at all, for a table with a primary key
            encode_row(schema, _row(6)),
            (None, value_header + b"\x02"),  # a body cut short: rejected for its body
        ],
    )

    _run(lake, ckpt, topic, kafka_bootstrap, None)

    assert _ids(spark, lake) == [(1, "n1"), (6, "n6")]
    errors = {offset: r.error for offset, r in _rejected(spark, lake).items()}
    where = {o: f" (topic {topic}, partition 0, offset {o})" for o in range(6)}
    fingerprint = key_header[2:].hex()
    assert errors == {
        1: f"Kafka key of table SHOP.ORDERS does not decode with its writer schema "
        f"(f:{fingerprint}){where[1]}",
        2: "Kafka key of table SHOP.ORDERS has an unknown writer schema (header "
        f"0xc301{'07' * 8}){where[2]}",
        3: "Kafka key of table SHOP.ORDERS has neither a Confluent (0x00 + id) nor a "
        f"single-object (0xC3 0x01 + fingerprint) header{where[3]}",
        4: f"Kafka key missing: table SHOP.ORDERS has a primary key{where[4]}",
        6: f"cannot decode the Avro body (f:{value_header[2:].hex()})",
    }


def test_keys_that_agree_apply_on_every_row_type(spark, kafka_bootstrap, setup):
    topic, schemas, lake, ckpt = setup
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    rows = [
        _row(1, "I"),
        _row(2, "I"),
        _row(3, "A"),
        _row(4, "I"),
        _row(5, "I"),
        _row(6, "I"),
        _row(7, "I"),
        {**_row(1, "U", t=2), "NAME": "u1"},
        _row(2, "B", t=2),
        {**_row(20, "U", t=2), "NAME": "moved"},  # 2 moved to 20
        {"ID": 3, "__change_type": "D", "__change_time": T0 + 2},
        {"ID": 4, "__change_type": "X", "__change_time": T0 + 2},
        {"ID": 5, "__change_type": "G", "__change_time": T0 + 2},
        _row(6, "P", t=2),
    ]
    _send(kafka_bootstrap, topic, [encode_row(schema, r) for r in rows])
    _run(lake, ckpt, topic, kafka_bootstrap, None)
    assert _ids(spark, lake) == [(1, "u1"), (6, "n6"), (7, "n7"), (20, "moved")]

    reload = [
        {"ID": 0, "__change_type": "T", "__change_time": T0 + 3},
        _row(8, "R", t=3),
        _row(9, "R", t=3),
    ]
    _send(kafka_bootstrap, topic, [encode_row(schema, r) for r in reload])
    _run(lake, ckpt, topic, kafka_bootstrap, None)

    assert _ids(spark, lake) == [(8, "n8"), (9, "n9")]
    assert _rejected(spark, lake) == {}


def test_an_append_only_key_is_the_transaction_time_of_its_value(spark, kafka_bootstrap, setup):
    topic, schemas, lake, ckpt = setup
    schema = sample_schema("EVENTS", keyed=False)
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    late = _row(3, t=1)
    _send(
        kafka_bootstrap,
        topic,
        [
            encode_row(schema, _row(1, t=1)),
            (None, encode_row(schema, _row(2, t=1))[1]),  # no key: nothing of it is applied
            (_key_of(schema, {"__change_time": T0 + 9}), encode_row(schema, late)[1]),
            encode_row(schema, _row(4, t=1)),
        ],
    )

    _run(lake, ckpt, topic, kafka_bootstrap, None)

    assert _ids(spark, lake, "EVENTS") == [(1, "n1"), (2, "n2"), (4, "n4")]
    errors = {offset: r.error for offset, r in _rejected(spark, lake).items()}
    assert errors == {
        2: "Kafka key disagrees with the value: table SHOP.EVENTS, key field __change_time: "
        "key 2023-11-14 22:13:20.000009, value 2023-11-14 22:13:20.000001 "
        f"(topic {topic}, partition 0, offset 2)"
    }


def test_a_reload_written_in_one_pass_checks_its_keys_too(
    spark, kafka_bootstrap, setup, monkeypatch
):
    """A reload bet (:mod:`lakehouse_writer.engines.spark.reload`) with a lying key is lost, not
    written."""
    topic, schemas, lake, ckpt = setup
    monkeypatch.setenv("LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS", "3")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    rows = [{"ID": 0, "__change_type": "T", "__change_time": T0 + 1}]
    rows += [_row(i, "R") for i in range(1, 6)]
    messages = [encode_row(schema, r) for r in rows]
    messages[3] = (_key_of(schema, {"ID": 33}), messages[3][1])  # the value is ID 3
    _send(kafka_bootstrap, topic, messages)

    _run(lake, ckpt, topic, kafka_bootstrap, None)

    assert _ids(spark, lake) == [(1, "n1"), (2, "n2"), (4, "n4"), (5, "n5")]
    errors = {offset: r.error for offset, r in _rejected(spark, lake).items()}
    assert errors == {
        3: "Kafka key disagrees with the value: table SHOP.ORDERS, key field ID: key 33, "
        f"value 3 (topic {topic}, partition 0, offset 3)"
    }


def test_a_key_schema_of_another_producer_on_the_catalog_is_decoded_and_checked(
    spark, kafka_bootstrap, setup
):
    """Not the key schema this project's producer writes: found by its catalog record."""
    topic, schemas, lake, ckpt = setup
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    other = {
        "type": "record",
        "name": "OrderKey",
        "namespace": "elsewhere",
        "fields": [{"name": "ID", "type": "long"}],
    }
    fingerprint = schema_fingerprint(other).hex()
    record = {
        "fingerprint": fingerprint,
        "schema": other,
        "subject": f"{topic}-key",
        "topic": topic,
        "kind": "key",
    }
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(schemas, key=fingerprint.encode(), value=json.dumps(record).encode())
    producer.flush(30)
    _send(
        kafka_bootstrap,
        topic,
        [
            (framed(other, {"ID": 1}), encode_row(schema, _row(1))[1]),
            (framed(other, {"ID": 7}), encode_row(schema, _row(2))[1]),
            encode_row(schema, _row(3)),
        ],
    )

    _run(lake, ckpt, topic, kafka_bootstrap, None)

    assert _ids(spark, lake) == [(1, "n1"), (3, "n3")]
    errors = {offset: r.error for offset, r in _rejected(spark, lake).items()}
    assert errors == {
        1: "Kafka key disagrees with the value: table SHOP.ORDERS, key field ID: key 7, "
        f"value 2 (topic {topic}, partition 0, offset 1)"
    }
