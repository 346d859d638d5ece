"""KafkaProducer against the real broker: visibility, framing, _flow_schemas, _commits, errors."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from decimal import Decimal
from pathlib import Path

import duckdb
import fastavro
import numpy as np
import pytest

from producer_lib.errors import EncodeError, ProduceError, SchemaError
from producer_lib.kafka import KafkaProducer
from producer_lib.kafka.partitioner import partitions_for_keys
from producer_lib.schema import (
    AvroDecimal,
    AvroLong,
    AvroNVarchar,
    AvroVarchar,
    KeySchema,
    RowType,
    ValueSchema,
    schema_fingerprint,
)
from producer_lib.settings import KafkaSettings
from tests.support.consume import consume_all
from tests.support.producers import ENCODINGS, encode_after_rows

pytestmark = pytest.mark.kafka
log = logging.getLogger("test")
REPO = Path(__file__).resolve().parents[3]


def _schema(pk: bool = True) -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("CODE", AvroVarchar(8))
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_field("AMOUNT", AvroDecimal(6, 2))
    if pk:
        schema.add_primary_key("ID")
    return schema


def _con(rows: int = 1000, extra: str = "") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(f"""create table ORDERS as select range::bigint as ID, 'C' || (range % 7) as CODE,
                'näme ' || range as NAME, (range % 1000 / 4)::decimal(6,2) as AMOUNT {extra}
                from range({rows})""")
    return con


def _settings(bootstrap: str, **kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, **kw)


def _producer(bootstrap: str, con=None, function: str | None = None, **kw) -> KafkaProducer:
    return KafkaProducer(
        "SHOPDB",
        function or f"fn_{uuid.uuid4().hex[:8]}",
        "bronze",
        "test",
        _settings(bootstrap, **kw),
        log,
        duckdb_connection=con,
    )


def _decode(message_bytes: bytes, schema: dict) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(message_bytes[10:]), fastavro.parse_schema(schema))


def _commit_record(bootstrap: str, commit_id: str) -> dict:
    for msg in consume_all(bootstrap, "_commits"):
        if msg.key() == commit_id.encode():
            return json.loads(msg.value())
    raise AssertionError(f"no _commits record {commit_id}")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_commit_is_visible_framed_cataloged_and_recorded(kafka_bootstrap, new_topic, encoding):
    topic = new_topic(partitions=3)
    schema, con = _schema(), _con(1000)
    key_json, value_json = KeySchema(schema).to_avro_json(), schema.to_avro_json()
    after_rows = encode_after_rows(encoding)
    with _producer(kafka_bootstrap, con, encode_process_after_rows=after_rows) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        assert producer.produce_from_duckdb("ORDERS", target, 300, RowType.REPLACE) == 1000
        commit_id = producer.commit()
    messages = consume_all(kafka_bootstrap, topic)
    assert len(messages) == 1000
    key_fp, value_fp = schema_fingerprint(key_json), schema_fingerprint(value_json)
    assert all(m.key()[:10] == b"\xc3\x01" + key_fp for m in messages)
    assert all(m.value()[:10] == b"\xc3\x01" + value_fp for m in messages)
    rows = sorted((_decode(m.value(), value_json) for m in messages), key=lambda r: r["ID"])
    assert rows[5]["NAME"] == "näme 5" and rows[5]["AMOUNT"] == Decimal("1.25")
    assert {r["__change_type"] for r in rows} == {"R"}
    assert {r["__source_system"] for r in rows} == {"SHOPDB"}
    assert all(
        _decode(m.key(), key_json)["ID"] == _decode(m.value(), value_json)["ID"] for m in messages
    )
    _assert_murmur2_partitions(messages)
    _assert_schemas_topic(kafka_bootstrap, topic, key_fp, value_fp, value_json)
    _assert_commit_record(kafka_bootstrap, commit_id, topic, messages, rows)


def _assert_murmur2_partitions(messages) -> None:
    keys = [m.key() for m in messages]
    buf = np.frombuffer(b"".join(keys), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(k) for k in keys])
    assert partitions_for_keys(buf, offsets, 3).tolist() == [m.partition() for m in messages]


def _assert_schemas_topic(bootstrap, topic, key_fp, value_fp, value_json) -> None:
    records = {
        (m.key(), json.loads(m.value())["subject"]): json.loads(m.value())
        for m in consume_all(bootstrap, "_flow_schemas")
    }
    value = records[(value_fp.hex().encode(), f"{topic}-value")]
    assert value == {
        "fingerprint": value_fp.hex(),
        "schema": value_json,
        "subject": f"{topic}-value",
        "topic": topic,
        "kind": "value",
    }
    assert records[(key_fp.hex().encode(), f"{topic}-key")]["kind"] == "key"


def _assert_commit_record(bootstrap, commit_id, topic, messages, rows) -> None:
    record = _commit_record(bootstrap, commit_id)
    assert record["producer"].startswith("test.bronze.fn_")
    assert record["source_system"] == "SHOPDB"
    assert record["transaction_time"] == int(rows[0]["__change_time"].timestamp() * 1e6)
    assert record["tables"] == [{"topic": topic, "table": "SHOP.ORDERS", "rows": 1000}]
    expected = []
    for p in sorted({m.partition() for m in messages}):
        offsets = [m.offset() for m in messages if m.partition() == p]
        expected.append(
            {
                "topic": topic,
                "partition": p,
                "min_offset": min(offsets),
                "max_offset": max(offsets),
                "rows": len(offsets),
            }
        )
    assert record["partitions"] == expected


def test_exception_inside_with_leaves_nothing_visible(kafka_bootstrap, new_topic):
    topic = new_topic()
    with pytest.raises(RuntimeError, match="boom"):
        with _producer(kafka_bootstrap, _con(100)) as producer:
            target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
            producer.produce_from_duckdb("ORDERS", target, 50, RowType.INSERT)
            raise RuntimeError("boom")
    assert consume_all(kafka_bootstrap, topic) == []


def test_leaving_with_without_commit_aborts_and_says_so(kafka_bootstrap, new_topic):
    topic = new_topic()
    with pytest.raises(ProduceError, match="call commit"):
        with _producer(kafka_bootstrap, _con(10)) as producer:
            target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
            producer.produce_from_duckdb("ORDERS", target, 50, RowType.INSERT)
    assert consume_all(kafka_bootstrap, topic) == []


def test_change_time_same_within_and_increasing_across_transactions(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    schema = _schema()
    with _producer(kafka_bootstrap, _con(200)) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        for _ in range(3):
            producer.produce_from_duckdb(
                "select * from ORDERS where ID < 100", target, 30, RowType.UPSERT
            )
            producer.produce_row(target, {"ID": 1}, {"ID": 1, "NAME": "x"}, RowType.DELETE)
            producer.commit()
    messages = consume_all(kafka_bootstrap, topic)
    assert len(messages) == 3 * 101
    times: dict[int, set] = {}
    for m in messages:
        row = _decode(m.value(), schema.to_avro_json())
        times.setdefault(row["__change_time"], set()).add(row["__change_type"])
    assert len(times) == 3 and all(kinds == {"A", "D"} for kinds in times.values())


def test_append_only_key_is_transaction_time(kafka_bootstrap, new_topic):
    topic = new_topic()
    schema = _schema(pk=False)
    with _producer(kafka_bootstrap, _con(5)) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("ORDERS", target, 10, RowType.INSERT)
        producer.commit()
    for m in consume_all(kafka_bootstrap, topic):
        key = _decode(m.key(), KeySchema(schema).to_avro_json())
        assert key["__change_time"] == _decode(m.value(), schema.to_avro_json())["__change_time"]


@pytest.mark.parametrize(
    ("bad_sql", "match"),
    [
        pytest.param(
            "update ORDERS set ID = NULL where ID = 50", "non-nullable", id="null-in-not-null"
        ),
        pytest.param(
            "update ORDERS set CODE = 'Ç1' where ID = 50", "ASCII", id="varchar-non-ascii"
        ),
        pytest.param(
            "alter table ORDERS alter AMOUNT type decimal(10,2); "
            "update ORDERS set AMOUNT = 123456.5 where ID = 50",
            "precision",
            id="decimal-out-of-range",
        ),
    ],
)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_bad_values_fail_and_send_nothing(kafka_bootstrap, new_topic, bad_sql, match, encoding):
    topic = new_topic()
    con = _con(100)
    con.sql(bad_sql)
    after_rows = encode_after_rows(encoding)
    with _producer(kafka_bootstrap, con, encode_process_after_rows=after_rows) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        with pytest.raises(EncodeError, match=match):  # the encoder's own checks
            producer.produce_from_duckdb("ORDERS", target, 1000, RowType.INSERT, check_keys=False)
    assert consume_all(kafka_bootstrap, topic, "read_uncommitted") == []


def test_missing_and_extra_columns_are_named(kafka_bootstrap, new_topic):
    topic = new_topic()
    with _producer(kafka_bootstrap, _con(5, extra=", 1 as SURPRISE")) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
        with pytest.raises(SchemaError, match="SURPRISE"):
            producer.produce_from_duckdb("ORDERS", target, 10, RowType.INSERT)
        with pytest.raises(SchemaError, match="AMOUNT"):
            producer.produce_from_duckdb(
                "select ID, CODE, NAME from ORDERS", target, 10, RowType.INSERT
            )


def test_unknown_target_is_named(kafka_bootstrap, new_topic):
    topic = new_topic()
    with _producer(kafka_bootstrap, _con(5)) as other:
        foreign = other.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
    with _producer(kafka_bootstrap, _con(5)) as producer:
        with pytest.raises(ProduceError, match=f"unknown target.*{topic}"):
            producer.produce_from_duckdb("ORDERS", foreign, 10, RowType.INSERT)
        with pytest.raises(ProduceError, match="unknown target"):
            producer.produce_row(foreign, {"ID": 1}, {"ID": 1}, RowType.INSERT)


def test_produce_after_close_fails(kafka_bootstrap, new_topic):
    topic = new_topic()
    with _producer(kafka_bootstrap, _con(5)) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(_schema()), _schema())
    with pytest.raises(ProduceError, match="closed"):
        producer.produce_row(target, {"ID": 1}, {"ID": 1}, RowType.INSERT)
    with pytest.raises(ProduceError, match="closed"):
        producer.commit()


@pytest.mark.slow
def test_unreachable_broker_fails_fast_naming_it():
    started = time.monotonic()
    producer = _producer("127.0.0.1:1", connect_timeout_s=3)
    with pytest.raises(ProduceError, match="127.0.0.1:1"):
        with producer:
            pass
    assert time.monotonic() - started < 15


def test_failed_message_fails_the_commit(kafka_bootstrap, new_topic):
    topic = new_topic(config={"max.message.bytes": "2000"})
    con = _con(3)
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(10000))
    schema.add_primary_key("ID")
    con.sql(
        "create table BIG as select ID, case when ID = 1 then repeat('x', 5000) end as NAME "
        "from ORDERS"
    )
    with _producer(kafka_bootstrap, con, overrides={"linger.ms": 0}) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("BIG", target, 10, RowType.INSERT, partition=0)
        with pytest.raises(ProduceError):
            producer.commit()
    assert consume_all(kafka_bootstrap, topic) == []


_KILLED_SCRIPT = """
import duckdb, logging, os, sys
from producer_lib.kafka import KafkaProducer
from producer_lib.schema import AvroLong, KeySchema, RowType, ValueSchema
from producer_lib.settings import KafkaSettings
schema = ValueSchema("ORDERS", "SHOP"); schema.add_field("ID", AvroLong(), nullable=False)
schema.add_primary_key("ID")
con = duckdb.connect(); con.sql("create table ORDERS as select range::bigint ID from range(500)")
producer = KafkaProducer("SHOPDB", sys.argv[3], "bronze", "test",
                         KafkaSettings(bootstrap_servers=sys.argv[1]), duckdb_connection=con)
with producer:
    target = producer.add_target(sys.argv[2], "ORDERS", KeySchema(schema), schema)
    producer.produce_from_duckdb("ORDERS", target, 100, RowType.INSERT)
    producer._kafka.flush(30)  # the rows really are in the log, uncommitted
    os._exit(9)
"""


@pytest.mark.slow
def test_killed_process_leaves_nothing_and_restart_commits(kafka_bootstrap, new_topic):
    topic, function = new_topic(), f"killed_{uuid.uuid4().hex[:8]}"
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_SCRIPT), kafka_bootstrap, topic, function],
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 9
    assert len(consume_all(kafka_bootstrap, topic, "read_uncommitted")) == 500
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_primary_key("ID")
    con = duckdb.connect()
    con.sql("create table ORDERS as select range::bigint ID from range(7)")
    with _producer(kafka_bootstrap, con, function=function) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("ORDERS", target, 100, RowType.INSERT)
        producer.commit()
    assert len(consume_all(kafka_bootstrap, topic)) == 7


def test_librdkafka_fails_commit_after_a_message_without_callback_failed(
    kafka_bootstrap, new_topic
):
    """What the producer relies on: no per-message callback is needed to notice a failure."""
    from confluent_kafka import KafkaException, Producer

    topic = new_topic(config={"max.message.bytes": "2000"})
    raw = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "linger.ms": 0,
            "transactional.id": f"raw-{uuid.uuid4().hex}",
        }
    )
    raw.init_transactions(30)
    raw.begin_transaction()
    raw.produce(topic, b"x" * 5000, b"k", 0)  # rejected by the broker: too large
    raw.flush(30)
    with pytest.raises(KafkaException) as info:
        raw.commit_transaction(30)
    assert info.value.args[0].txn_requires_abort()
    raw.abort_transaction(30)


def test_truncate_then_replace_of_a_keyed_table_as_in_design(kafka_bootstrap, new_topic):
    """DESIGN's initial load: TRUNCATE on partition 0, then every row as REPLACE, one commit."""
    from producer_lib.schema import create_key_row, create_truncate_row

    topic = new_topic(partitions=2)
    schema = _schema()
    key_schema = KeySchema(schema)
    with _producer(kafka_bootstrap, _con(50)) as producer:
        target = producer.add_target(topic, "ORDERS", key_schema, schema)
        truncate_row = create_truncate_row(schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate_row, key_schema),
            truncate_row,
            RowType.TRUNCATE,
            partition=0,
        )
        sent = producer.produce_from_duckdb("ORDERS", target, 20, RowType.REPLACE)
        producer.commit()

    rows = [_decode(m.value(), schema.to_avro_json()) for m in consume_all(kafka_bootstrap, topic)]
    truncates = [r for r in rows if r["__change_type"] == "T"]
    assert sent == 50 and len(rows) == 51
    assert len(truncates) == 1 and truncates[0]["__truncate"] is None
    assert {r["__change_time"] for r in rows} == {truncates[0]["__change_time"]}
    assert sorted(r["ID"] for r in rows if r["__change_type"] == "R") == list(range(50))


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("thread", {"check_keys", "encode", "send"}),
        ("process", {"check_keys", "encode_process", "wait_read", "wait_encode", "send"}),
    ],
)
def test_the_export_log_splits_its_time_by_step(
    kafka_bootstrap, new_topic, caplog, encoding, expected
):
    """Where a slow export spends its time: key check, encode, waiting, send, flush, commit."""
    topic = new_topic(partitions=3)
    schema, con = _schema(), _con(5000)
    caplog.set_level(logging.INFO, logger="test")
    after_rows = encode_after_rows(encoding)
    with _producer(kafka_bootstrap, con, encode_process_after_rows=after_rows) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("ORDERS", target, 1000, RowType.REPLACE)
        producer.commit()

    produced = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("produced"))
    steps = dict(s.split(":") for s in produced.split("steps=")[1].split(","))
    assert set(steps) == expected, produced
    assert all(float(v) >= 0 for v in steps.values())  # seconds; 5,000 rows may take < 0.005
    committed = next(
        r.getMessage() for r in caplog.records if r.getMessage().startswith("committed")
    )
    assert "flush_s=" in committed and "commit_s=" in committed, committed
