"""The writer logs in to a schema registry the way the producer does (issue "two defects", 2).

The writer's registry client used to get the URL alone: against a registry that asks for a
login every Confluent-framed row landed in ``_rejected`` as "unknown schema". Here the
registry (Apicurio) sits behind TLS and a login (:mod:`tests.support.registry_login`); the
real producer registers and frames with the ``SCHEMA_REGISTRY_*`` settings, the real writer
decodes with the same ones, and a wrong password stops the writer at its start, naming the
registry and the settings, with the password nowhere.
"""

from __future__ import annotations

import uuid

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.status import read_status
from producer_lib.kafka import KafkaProducer
from producer_lib.schema import KeySchema, RowType, create_key_row
from producer_lib.settings import KafkaSettings
from tests.support.writer import once_argv, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _publish(bootstrap: str, topic: str) -> None:
    schema = sample_schema()
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    with KafkaProducer("SHOPDB", f"fn_{uuid.uuid4().hex[:8]}", "test", "dev", settings) as p:
        target = p.add_target(topic, "ORDERS", KeySchema(schema), schema)
        for i in (1, 2, 3):
            row = {"ID": i, "NAME": f"n{i}"}
            p.produce_row(target, create_key_row(row, target.key_schema), row, RowType.UPSERT)
        p.commit()


@pytest.mark.parametrize(
    ("login", "small_merge_rows"),
    [("basic", 100), ("bearer", 100), ("basic", 0)],
    ids=["basic-driver", "bearer-driver", "basic-spark"],  # both decode paths of the writer
)
def test_rows_framed_by_a_registry_that_asks_for_a_login_decode(
    spark,
    kafka_bootstrap,
    new_topic,
    tmp_path,
    monkeypatch,
    secured_registry,
    login,
    small_merge_rows,
):
    for name, value in secured_registry.env(login, _secret(login)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", str(small_merge_rows))
    topic = new_topic()
    _publish(kafka_bootstrap, topic)  # Confluent-framed: 0x00 + the registry's id
    refused = len(secured_registry.refused)
    lake = tmp_path / "lake"

    assert main(once_argv(lake, tmp_path / "ckpt", topic, kafka_bootstrap)) == 0

    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    assert sorted((r.ID, r.NAME) for r in table.collect()) == [(1, "n1"), (2, "n2"), (3, "n3")]
    assert not (lake / "_rejected").exists()
    assert len(secured_registry.refused) == refused  # the writer never went in without it


def test_a_wrong_password_stops_the_writer_at_start_without_showing_it(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, secured_registry, capsys, caplog
):
    for name, value in secured_registry.env().items():
        monkeypatch.setenv(name, value)
    topic = new_topic()
    _publish(kafka_bootstrap, topic)
    wrong = "Wr0ng-registry-pw-2b7e"
    monkeypatch.setenv("SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD", wrong)
    checkpoint, lake = tmp_path / "ckpt", tmp_path / "lake"

    code = main(once_argv(lake, checkpoint, topic, kafka_bootstrap))

    assert code == 1
    error = (read_status(str(checkpoint)) or {}).get("error") or ""
    assert "schema registry refused" in error and "HTTP 401" in error
    assert secured_registry.url in error
    assert "SCHEMA_REGISTRY_BASIC_AUTH_USER/SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD" in error
    assert not (lake / "SHOP" / "ORDERS").exists()  # stopped before a row was read
    out = capsys.readouterr()
    shown = [out.out, out.err, caplog.text, *(p.read_text() for p in checkpoint.iterdir())]
    assert not [text for text in shown if wrong in text]


def _secret(login: str) -> str:
    from tests.support.registry_login import PASSWORD, TOKEN

    return PASSWORD if login == "basic" else TOKEN
