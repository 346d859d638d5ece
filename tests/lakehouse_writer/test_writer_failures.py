"""How the writer fails: within a bound, with status ``failed``, one line naming the cause.

Issue 24, items 6-8: an unreachable broker was retried without end; a failed run left no
status file and a 2,600-line trace; a topics regex Python refuses made the writer create
tables for topics it did not read.
"""

from __future__ import annotations

import re
import time

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.errors import TopicPatternError, WriterFailed
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.runtime.failure import Failure, secrets_of
from lakehouse_writer.runtime.status import read_status
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream import job
from tests.support.writer import (
    T0,
    WriterProcess,
    produce_transaction,
    publish_schemas,
    sample_schema,
    writer_env,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

UNREACHABLE = "127.0.0.1:1"
ROW = {"ID": 1, "NAME": "a", "__change_type": "I", "__change_time": T0}
BOUND_S, SLACK_S = 5, 25  # the connect timeout asked for; Python's and the probe's start-up


def _last_line(log: str) -> str:
    return [line for line in log.splitlines() if line.strip()][-1]


@pytest.mark.slow
def test_an_unreachable_broker_fails_within_the_connect_timeout_naming_it(tmp_path):
    checkpoint = tmp_path / "ckpt"
    writer = WriterProcess(
        ["--lakehouse", str(tmp_path / "lake"), "--checkpoint", str(checkpoint), "--once"],
        {"KAFKA_BOOTSTRAP_SERVERS": UNREACHABLE, "LAKEHOUSE_CONNECT_TIMEOUT_S": str(BOUND_S)},
        tmp_path / "writer.log",
        str(checkpoint),
    )
    started = time.monotonic()
    try:
        code = writer.wait(BOUND_S + SLACK_S)
    finally:
        if writer.proc.poll() is None:
            writer.kill9()
    elapsed = time.monotonic() - started
    log = writer.tail(400)
    assert code == 1 and elapsed < BOUND_S + SLACK_S, log
    last = _last_line(log)
    assert UNREACHABLE in last and "did not answer within 5 s" in last, log
    status = writer.status()
    assert status and status["state"] == "failed" and UNREACHABLE in status["error"], status


@pytest.mark.slow
def test_a_lakehouse_under_a_regular_file_fails_with_its_root_cause(
    kafka_bootstrap, new_topic, tmp_path
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    produce_transaction(kafka_bootstrap, topic, schema, [ROW])
    (tmp_path / "a_file").write_text("not a directory")
    checkpoint = tmp_path / "ckpt"
    writer = WriterProcess(
        [
            "--lakehouse",
            str(tmp_path / "a_file" / "lake"),
            "--checkpoint",
            str(checkpoint),
            "--topics",
            topic,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--once",
        ],
        {"LAKEHOUSE_SCHEMAS_TOPIC": schemas},
        tmp_path / "writer.log",
        str(checkpoint),
    )
    try:
        code = writer.wait(300)
    finally:
        if writer.proc.poll() is None:
            writer.kill9()
    log = writer.tail(10_000)
    assert code == 1, log
    status = writer.status()
    assert status and status["state"] == "failed", status
    assert status["error"].startswith("ParentNotDirectoryException: "), status
    assert "a_file" in status["error"]
    last = _last_line(log)
    assert "ParentNotDirectoryException: " in last and "a_file" in last and len(last) < 500
    assert "\tat " not in log, "a Java stack trace reached stderr"
    trace = (checkpoint / "writer_error.log").read_text()
    assert "ParentNotDirectoryException" in trace and "\tat " in trace  # the whole trace, kept


@pytest.mark.slow
def test_a_topic_pattern_is_compiled_and_matched_by_java(spark):
    regex = r"orders_\p{Alpha}+"
    with pytest.raises(re.error):
        re.compile(regex)  # what the writer used to ask, and then took every topic for its own
    ours = TopicPattern(spark, regex)
    assert ours("orders_eu") and not ours("orders_42") and not ours("x_orders_eu")
    many = [f"orders_{name}" for name in ("eu", "us", "42", "eu_2")] + ["x_orders_eu"]
    many += [f"orders_{i}" for i in range(5_000)] + [f"orders_{'ab' * i}" for i in range(1, 200)]
    assert TopicPattern(spark, regex).select(many) == {t for t in many if ours(t)}
    assert ours.select(["orders_us", "orders_eu", "orders_eu_2"]) == {"orders_us", "orders_eu"}
    assert ours.select(["orders_\nx"]) == set()  # not a topic name: still answered
    with pytest.raises(TopicPatternError, match=r"Unclosed character class.*regex='orders_\[eu'"):
        TopicPattern(spark, "orders_[eu")


@pytest.mark.slow
def test_only_the_topics_the_java_pattern_matches_get_tables(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    ours, other = new_topic(suffix="_ours"), new_topic(suffix="_other")
    schemas = new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, ours, schemas, sample_schema("ORDERS"))
    publish_schemas(kafka_bootstrap, other, schemas, sample_schema("OTHER"))
    produce_transaction(kafka_bootstrap, ours, sample_schema("ORDERS"), [ROW])
    lake = tmp_path / "lake"
    settings = LakehouseSettings(
        **writer_env(
            str(lake),
            str(tmp_path / "ckpt"),
            kafka_bootstrap,
            LAKEHOUSE_SCHEMAS_TOPIC=schemas,
            LAKEHOUSE_TOPICS_REGEX=rf"\Q{ours}\E\p{{Alpha}}*",
        )
    )
    job.run(spark, settings, once=True)
    assert (lake / "SHOP" / "ORDERS" / "_delta_log").is_dir()
    assert not (lake / "SHOP" / "OTHER").exists(), "a table for a topic the writer does not read"


@pytest.mark.slow
def test_a_bad_topic_pattern_fails_before_anything_is_written(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, topic, schemas, sample_schema())
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    settings = LakehouseSettings(
        **writer_env(
            str(lake),
            str(checkpoint),
            kafka_bootstrap,
            LAKEHOUSE_SCHEMAS_TOPIC=schemas,
            LAKEHOUSE_TOPICS_REGEX=f"{topic}[",
        )
    )
    with pytest.raises(WriterFailed, match="TopicPatternError: .*Unclosed character class"):
        job.run(spark, settings, once=True)
    status = read_status(str(checkpoint))
    assert status and status["state"] == "failed", status
    assert status["error"].startswith("TopicPatternError: ") and f"{topic}[" in status["error"]
    assert not lake.exists()


@pytest.mark.slow
def test_a_failure_names_the_innermost_java_cause_without_secrets(spark, tmp_path):
    secret = "pw-9f3a1c"  # a path is the easiest way to put a value into a JVM error
    with pytest.raises(Exception) as caught:  # noqa: B017, PT011 - whatever pyspark raises
        spark.read.format("delta").load(str(tmp_path / secret))
    failure = Failure.of(caught.value, secrets=[secret])
    assert failure.cause.startswith("AnalysisException: ") and "***" in failure.cause
    assert secret not in failure.cause and secret not in failure.trace


def test_a_failed_start_shows_no_secret_anywhere(tmp_path, monkeypatch, capsys, caplog):
    secrets = {
        "KAFKA_SASL_PASSWORD": "kafka-pw-51c0",
        "KAFKA_OAUTH_CLIENT_SECRET": "oauth-7d2e",
        "SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD": "registry-pw-a4b9",
    }
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": "writer",
        "SCHEMA_REGISTRY_URL": "http://127.0.0.1:1",
        "SCHEMA_REGISTRY_BASIC_AUTH_USER": "reader",
        **secrets,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KAFKA_OVERRIDES", '{"ssl.key.password": "override-pw-77e1"}')
    secrets["KAFKA_OVERRIDES"] = "override-pw-77e1"  # a librdkafka key that holds a secret
    settings = LakehouseSettings(**writer_env(str(tmp_path / "lake"), "ckpt", UNREACHABLE))
    assert sorted(secrets_of(settings)) == sorted(secrets.values())  # nested settings too
    checkpoint = tmp_path / "ckpt"
    argv = [
        "run",
        "--lakehouse",
        str(tmp_path / "lake"),
        "--checkpoint",
        str(checkpoint),
        "--bootstrap-servers",
        UNREACHABLE,
        "--connect-timeout",
        "1",
        "--once",
    ]
    code = main(argv)
    out = capsys.readouterr()
    shown = [out.out, out.err, caplog.text, *(p.read_text() for p in checkpoint.iterdir())]
    assert code == 1 and "KafkaUnreachable" in (read_status(str(checkpoint)) or {})["error"]
    for secret in secrets.values():
        assert not [text for text in shown if secret in text], secret
