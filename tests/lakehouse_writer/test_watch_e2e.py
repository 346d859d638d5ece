"""Watching a real writer: its monitoring consumer group on the broker, its ``/metrics``.

The group is read back with the AdminClient, as ``kafka-consumer-groups --describe`` reads
it; the endpoint is scraped over HTTP from a writer running as its own process.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from lakehouse_writer.cli import main
from tests.support.metrics import samples
from tests.support.ports import free_port_pair
from tests.support.writer import (
    T0,
    WriterProcess,
    once_argv,
    produce_transaction,
    publish_schemas,
    sample_schema,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SCHEMA = sample_schema()


def _rows(first: int, n: int) -> list[dict[str, object]]:
    return [
        {
            "ID": i,
            "NAME": f"n{i}",
            "__change_type": "I",
            "__change_time": T0 + 1,
            "partition": i % 2,
        }
        for i in range(first, first + n)
    ]


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "h2-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [
        ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    ]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def test_after_a_run_the_monitor_group_holds_the_writers_end_offsets(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, capsys
):
    topic, schemas = new_topic(partitions=2), new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, topic, schemas, SCHEMA)
    produce_transaction(kafka_bootstrap, topic, SCHEMA, _rows(1, 5))
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    monkeypatch.delenv("LAKEHOUSE_MONITOR_GROUP", raising=False)
    checkpoint = tmp_path / "ckpt"
    where = ["--lakehouse", str(tmp_path / "lake"), "--checkpoint", str(checkpoint)]
    assert (
        main(["run", *where, "--once", "--topics", topic, "--bootstrap-servers", kafka_bootstrap])
        == 0
    )

    instance = (checkpoint / "lakehouse_writer_instance").read_text().strip()
    group = f"lakehouse-writer-{instance}"
    ends = _high_watermarks(kafka_bootstrap, topic, 2)
    assert all(end > 0 for end in ends.values())  # rows and commit markers on both
    assert _group_offsets(kafka_bootstrap, group, topic, 2) == ends
    capsys.readouterr()
    assert main(["status", *where]) == 0
    assert f"monitor group: {group}" in capsys.readouterr().out


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return samples(text)


def _wait_for(port: int, name: str, value: float, writer: WriterProcess) -> dict[str, float]:
    return _wait_until(port, f"{name} == {value}", lambda got: got.get(name) == value, writer)


def _wait_until(
    port: int, what: str, done: Callable[[dict[str, float]], bool], writer: WriterProcess
) -> dict[str, float]:
    deadline = time.monotonic() + 300
    got: dict[str, float] = {}
    while time.monotonic() < deadline and writer.proc.poll() is None:
        try:
            got = _scrape(port)
        except OSError:
            pass  # not listening yet
        if done(got):
            return got
        time.sleep(0.5)
    raise AssertionError(f"not {what}: {got}\n{writer.tail()}")


def test_a_running_writer_serves_its_metrics(spark, kafka_bootstrap, new_topic, tmp_path: Path):
    topic, schemas = new_topic(partitions=2), new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, topic, schemas, SCHEMA)
    produce_transaction(kafka_bootstrap, topic, SCHEMA, _rows(1, 4))
    port, checkpoint = free_port_pair(), tmp_path / "ckpt"
    writer = WriterProcess(
        [
            "--lakehouse",
            str(tmp_path / "lake"),
            "--checkpoint",
            str(checkpoint),
            "--topics",
            topic,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--trigger-interval",
            "1",
        ],
        {
            "LAKEHOUSE_SCHEMAS_TOPIC": schemas,
            "LAKEHOUSE_METRICS_PORT": str(port),
            "LAKEHOUSE_METRICS_HOST": "127.0.0.1",
            "LAKEHOUSE_MONITOR_GROUP": "off",
        },
        tmp_path / "writer.log",
        str(checkpoint),
    )
    rows = 'lakehouse_writer_rows_applied_total{table="SHOP.ORDERS"}'
    try:
        _wait_for(port, rows, 4, writer)
        produce_transaction(kafka_bootstrap, topic, SCHEMA, _rows(5, 3))
        _wait_for(port, rows, 7, writer)
        # The durations come from Spark's progress reports, which the writer polls each
        # second: they may trail the batch's rows by that much.
        count = "lakehouse_writer_batch_duration_seconds_count"
        got = _wait_until(port, f"{count} >= 1", lambda m: m.get(count, 0) >= 1, writer)
        assert got[rows] == 7
        assert got['lakehouse_writer_state{state="running"}'] == 1
        assert got["lakehouse_writer_last_batch_id"] >= 1
        assert got["lakehouse_writer_rows_rejected_total"] == 0
        assert got["lakehouse_writer_stopped_tables"] == 0
        for partition in (0, 1):  # lag of each partition, caught up (or about to be)
            assert f'lakehouse_writer_lag_offsets{{topic="{topic}",partition="{partition}"}}' in got
        writer.proc.send_signal(signal.SIGTERM)
        assert writer.wait(180) == 0, writer.tail()
    finally:
        if writer.proc.poll() is None:
            writer.kill9()


def test_a_taken_metrics_port_fails_the_run_naming_it(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    from lakehouse_writer.runtime.status import read_status

    topic = new_topic()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("LAKEHOUSE_METRICS_PORT", str(port))
        monkeypatch.setenv("LAKEHOUSE_METRICS_HOST", "127.0.0.1")
        checkpoint = tmp_path / "ckpt"
        code = main(once_argv(tmp_path / "lake", checkpoint, topic, kafka_bootstrap))
    assert code == 1
    error = (read_status(str(checkpoint)) or {})["error"]
    assert "MetricsUnavailable" in error and "LAKEHOUSE_METRICS_PORT" in error
    assert f"port={port}" in error
