"""End to end: framed change rows on Kafka → `lakehouse-writer run --once` → Delta tables."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer

from lakehouse_writer.cli import main
from producer_lib.schema import schema_fingerprint, single_object_header
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _commit_record(topic: str, time_us: int) -> tuple[str, bytes, bytes]:
    commit_id = str(uuid.uuid4())
    value = {
        "commit_id": commit_id,
        "producer": "test",
        "source_system": "TEST",
        "function_name": "f",
        "transaction_time": time_us,
        "tables": [{"topic": topic, "table": "SHOP.ORDERS", "rows": 4}],
        "partitions": [
            {"topic": topic, "partition": 0, "min_offset": 0, "max_offset": 3, "rows": 4}
        ],
    }
    return commit_id, commit_id.encode(), json.dumps(value).encode()


def _poison(bootstrap: str, topic: str, schema_json: dict) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    good_header = single_object_header(schema_fingerprint(schema_json))
    producer.produce(topic, value=b"random bytes, no header", partition=0)
    producer.produce(topic, value=b"\xc3\x01" + b"\x01" * 8 + b"\x02abc", partition=0)
    producer.produce(topic, value=good_header + b"\x02", partition=0)  # truncated body
    producer.flush(30)


@pytest.mark.parametrize("max_offsets", [None, 2], ids=["one-batch", "small-batches"])
def test_writer_applies_committed_transactions_and_rejects_poison(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, max_offsets
):
    topic = new_topic(partitions=2)
    schemas, commits = new_topic(suffix="_schemas"), new_topic(suffix="_commits")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    commit_id, ckey, cvalue = _commit_record(topic, T0 + 1)
    produce_transaction(
        kafka_bootstrap,
        topic,
        schema,
        [
            {
                "ID": i,
                "NAME": f"n{i}",
                "REGION": "A" if i < 4 else "B",
                "__change_type": "I",
                "__change_time": T0 + 1,
                "partition": i % 2,
            }
            for i in range(1, 5)
        ],
        extra=[(commits, ckey, cvalue)],
    )
    produce_transaction(
        kafka_bootstrap,
        topic,
        schema,
        [
            {
                "ID": 1,
                "NAME": "n1-updated",
                "REGION": "A",
                "__change_type": "U",
                "__change_time": T0 + 2,
                "partition": 1,
            },
            {"ID": 2, "NAME": "n2", "__change_type": "D", "__change_time": T0 + 2},
        ],
    )
    produce_transaction(
        kafka_bootstrap,
        topic,
        schema,
        [
            {"ID": 99, "NAME": "ghost", "__change_type": "I", "__change_time": T0 + 3},
        ],
        commit=False,
    )
    produce_transaction(
        kafka_bootstrap,
        topic,
        schema,
        [
            {"ID": 0, "__change_type": "T", "__change_time": T0 + 4, "__truncate": {"REGION": "B"}},
            {"ID": 10, "NAME": "n10", "REGION": "B", "__change_type": "R", "__change_time": T0 + 4},
        ],
    )
    _poison(kafka_bootstrap, topic, schema.to_avro_json())

    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    monkeypatch.setenv("LAKEHOUSE_COMMITS_TOPIC", commits)
    argv = once_argv(lake, ckpt, f"{topic}|{commits}", kafka_bootstrap)
    if max_offsets:
        argv += ["--max-offsets-per-trigger", str(max_offsets)]
    assert main(argv) == 0

    rows = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    got = sorted((r.ID, r.NAME, r.REGION) for r in rows.collect())
    assert got == [(1, "n1-updated", "A"), (3, "n3", "A"), (10, "n10", "B")]
    rejected = spark.read.format("delta").load(str(lake / "_rejected")).collect()
    assert len(rejected) == 3
    assert all(r.topic == topic and r.error for r in rejected)
    header = single_object_header(schema_fingerprint(schema.to_avro_json()))
    assert sorted(bytes(r.value) for r in rejected) == sorted(
        [  # the bytes as sent, exactly
            b"random bytes, no header",
            b"\xc3\x01" + b"\x01" * 8 + b"\x02abc",
            header + b"\x02",
        ]
    )
    committed = spark.read.format("delta").load(str(lake / "_commits")).collect()
    assert [(c.commit_id, c.transaction_time) for c in committed] == [(commit_id, T0 + 1)]
    assert committed[0].table_versions["SHOP.ORDERS"] >= 1
    status = json.loads((ckpt / "writer_status.json").read_text())
    assert status["state"] == "drained" and status["pending_commits"] == 0
    assert status["lag"] and all(v == 0 for v in status["lag"].values())
    assert max_offsets or status["rows_applied"] == {"SHOP.ORDERS": 8}

    # a second run finds nothing new and changes nothing
    assert main(argv) == 0
    assert spark.read.format("delta").load(str(lake / "_rejected")).count() == 3


def test_the_topics_regex_names_whole_topics(
    spark, kafka_bootstrap, kafka_admin, new_topic, tmp_path, monkeypatch
):
    """``--topics X`` reads X, not ``X_more``: Spark alone would find X inside the name."""
    from confluent_kafka.admin import NewTopic

    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    longer = f"{topic}_more"
    kafka_admin.create_topics([NewTopic(longer, 1, 1)])[longer].result(timeout=30)
    try:
        for name, target in ((topic, "ORDERS"), (longer, "OTHER")):
            schema = sample_schema(name=target)
            publish_schemas(kafka_bootstrap, name, schemas, schema)
            produce_transaction(
                kafka_bootstrap,
                name,
                schema,
                [
                    {"ID": 1, "NAME": target, "__change_type": "I", "__change_time": T0 + 1},
                ],
            )
        lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
        monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
        argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
        assert main(argv) == 0
    finally:
        kafka_admin.delete_topics([longer])[longer].result(timeout=30)

    rows = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS")).collect()
    assert [(r.ID, r.NAME) for r in rows] == [(1, "ORDERS")]
    assert not (lake / "SHOP" / "OTHER").exists()
    status = json.loads((ckpt / "writer_status.json").read_text())
    assert set(status["lag"]) == {topic}
