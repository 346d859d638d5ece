"""The lakehouse writer on the secured broker: `run --once` as the writer user, through Spark.

The flow commits rows as its own user; the writer, configured only by the ``KAFKA_*``
variables ``devstack up --secure`` prints, applies them to Delta over SASL_SSL (Spark's Kafka
source gets ``kafka.security.protocol``, ``kafka.sasl.jaas.config`` with the SCRAM login
module and the CA as a PEM truststore). With a wrong password it stops before the query.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from devstack import secure
from lakehouse_writer.cli import main as writer_main
from producer_lib import KafkaProducer, KeySchema, RowType
from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema
from tests.security.conftest import Flow

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]
ROWS = 200


def _commit_rows(flow: Flow, topic: str) -> str:
    schema = ValueSchema("ORDERS", f"SEC_{uuid.uuid4().hex[:6].upper()}")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_primary_key("ID")
    con = duckdb.connect()
    con.sql(
        f"create table ORDERS as select range::bigint as ID, 'n' || range as NAME "
        f"from range({ROWS})"
    )
    with KafkaProducer(
        "SHOPDB",
        flow.grant.function,
        flow.grant.zone,
        flow.grant.environment,
        flow.settings(),
        duckdb_connection=con,
    ) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        producer.produce_from_duckdb("ORDERS", target, 100, RowType.REPLACE)
        producer.commit()
    return schema.namespace


def _writer_env(monkeypatch, secured, flow: Flow, password: str | None = None) -> None:
    real = secure.credentials(secured)[secure.WRITER]
    for name, value in secure.env_settings(secured, secure.WRITER, password or real).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LAKEHOUSE_TOPICS_REGEX", re.escape(flow.grant.topic_prefix) + ".*")


def _files_text(*roots: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace")
        for root in roots
        for p in root.rglob("*")
        if p.is_file() and p.stat().st_size < 1_000_000
    )


@pytest.mark.slow
def test_the_writer_user_applies_a_flows_commit_over_sasl_ssl(
    spark, secured, flow, tmp_path, monkeypatch
):
    namespace = _commit_rows(flow, flow.topic("orders"))
    _writer_env(monkeypatch, secured, flow)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"

    code = writer_main(["run", "--once", "--lakehouse", str(lake), "--checkpoint", str(ckpt)])

    assert code == 0
    rows = spark.read.format("delta").load(str(lake / namespace / "ORDERS"))
    assert rows.count() == ROWS
    assert '"drained"' in (ckpt / "writer_status.json").read_text()
    passwords = list(secure.credentials(secured).values())
    files = _files_text(lake, ckpt)  # status file, Delta logs, Spark's checkpoint
    assert not [p[:4] for p in passwords if p in files]


def _run_with_a_wrong_password(secured, flow, tmp_path, monkeypatch, caplog):
    wrong = f"wrong-{uuid.uuid4().hex}"
    _writer_env(monkeypatch, secured, flow, password=wrong)
    ckpt = tmp_path / "ckpt"
    argv = [
        "run",
        "--once",
        "--lakehouse",
        str(tmp_path / "lake"),
        "--checkpoint",
        str(ckpt),
        "--connect-timeout",
        "5",
    ]
    started = time.monotonic()
    code = writer_main(argv)
    took = time.monotonic() - started
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    return wrong, code, took, "\n".join(said), (ckpt / "writer_status.json").read_text()


def test_the_writer_with_a_wrong_password_stops_before_its_query(
    spark, secured, flow, tmp_path, monkeypatch, caplog
):
    wrong, code, took, said, status = _run_with_a_wrong_password(
        secured, flow, tmp_path, monkeypatch, caplog
    )
    assert code != 0 and took < 15
    assert f"Kafka at {secured.bootstrap}" in said  # what it could not use
    assert '"failed"' in status
    assert wrong not in said + status


def test_the_writer_with_a_wrong_password_names_authentication(
    spark, secured, flow, tmp_path, monkeypatch, caplog
):
    wrong, code, took, said, status = _run_with_a_wrong_password(
        secured, flow, tmp_path, monkeypatch, caplog
    )
    assert code != 0 and took < 5  # refused at once: not the 5 s connect timeout
    assert "authentication failed" in said.lower()
    assert "KAFKA_SASL_USERNAME" in said and "KAFKA_SASL_PASSWORD" in said
    assert "did not answer" not in said and "network" not in said
    assert "KafkaRefused" in status and "authentication failed" in status
    assert wrong not in said + status
