"""Producer and runner on the secured broker: right credentials work, wrong ones fail fast.

The broker (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer) is the session's ``secured``
fixture; each test gets its own flow user, whose ACLs cover its own topic prefix, the system
topics and its transactional ids. No generated password may appear in any output (checked
after every test by the ``no_secret_in_output`` fixture) nor in any error text (here).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from devstack import acls, secure, tls
from producer_lib import FunctionRunner, KafkaProducer, KeySchema, RowType, RunFailed
from producer_lib.errors import ProduceError
from producer_lib.kafka.topics import COMMITS_TOPIC, EXECUTION_LOG_TOPIC
from producer_lib.schema import AvroLong, AvroNVarchar, ValueSchema
from tests.security.conftest import Flow, create_topic, read_all
from tests.support.runner_flows import NumbersFlow

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
FAST_S = 5.0  # a refused login, certificate or ACL: seconds past the connect timeout at most


def _schema() -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_primary_key("ID")
    return schema


def _orders(rows: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(
        f"create table ORDERS as select range::bigint as ID, 'n' || range as NAME "
        f"from range({rows})"
    )
    return con


def _producer(flow: Flow, con: duckdb.DuckDBPyConnection | None = None, **kw) -> KafkaProducer:
    settings = flow.settings(**kw)
    return KafkaProducer(
        "SHOPDB",
        flow.grant.function,
        flow.grant.zone,
        flow.grant.environment,
        settings,
        duckdb_connection=con,
    )


def _secrets(flow: Flow) -> list[str]:
    return list(secure.credentials(flow.layout).values())


def test_a_flow_produces_and_the_writer_reads_its_commit(flow, writer_conf):
    topic = flow.topic("orders")
    schema = _schema()
    with _producer(flow, _orders(500)) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema, partitions=2)
        assert producer.produce_from_duckdb("ORDERS", target, 200, RowType.REPLACE) == 500
        commit_id = producer.commit()

    assert len(read_all(writer_conf, topic)) == 500
    settings = flow.settings()
    shown = [repr(settings), str(settings), settings.describe(), repr(producer)]
    assert not [s for s in _secrets(flow) if any(s in text for text in shown)]
    commits = [
        json.loads(m.value())
        for m in read_all(writer_conf, COMMITS_TOPIC)
        if m.key() == commit_id.encode()
    ]
    assert [c["tables"][0]["rows"] for c in commits] == [500]


def test_a_function_runner_flow_runs_initial_and_delta(flow, writer_conf, monkeypatch):
    for name, value in flow.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLOW_ENVIRONMENT", flow.grant.environment)
    monkeypatch.setenv("RUNNER_TEST_FUNCTION", flow.grant.function)
    monkeypatch.setenv("RUNNER_TEST_TOPIC", flow.topic("numbers"))

    first = asyncio.run(NumbersFlow().run("initial"))
    second = asyncio.run(NumbersFlow().run("delta"))

    assert (first.status, first.delta_pointer) == ("COMPLETED", 9)
    assert (second.status, second.delta_pointer, second.rows) == (
        "COMPLETED",
        14,
        {"TEST.NUMBERS": 5},
    )
    assert len(read_all(writer_conf, flow.topic("numbers"))) == 16  # TRUNCATE + 10 + 5
    key = f"{flow.grant.function}|default|0".encode()
    statuses = [
        json.loads(m.value())["status"]
        for m in read_all(writer_conf, EXECUTION_LOG_TOPIC)
        if m.key() == key
    ]
    assert statuses == ["STARTED", "COMPLETED", "STARTED", "COMPLETED"]


def _refused(flow: Flow, **settings) -> tuple[ProduceError, float]:
    started = time.monotonic()
    with pytest.raises(ProduceError) as refused:
        with _producer(flow, **settings):
            pass
    return refused.value, time.monotonic() - started


def test_a_wrong_password_fails_fast_naming_authentication(flow):
    wrong = f"wrong-{uuid.uuid4().hex}"
    error, took = _refused(flow, sasl_password=wrong, connect_timeout_s=5.0)

    text = str(error)
    assert took < 5.0 + FAST_S
    assert "authentication failed" in text and "KAFKA_SASL_PASSWORD" in text
    assert f"sasl_username='{flow.grant.user}'" in text
    assert "invalid credentials" in text  # the broker's own reason, passed on
    assert wrong not in text and wrong not in repr(error)
    assert not [s for s in _secrets(flow) if s in text or s in repr(error)]


def test_an_untrusted_certificate_fails_fast_naming_tls(flow, tmp_path):
    rogue = tls.make_ca(tmp_path / "rogue", "a CA that did not sign the broker")
    error, took = _refused(flow, ssl_ca_location=str(rogue.ca), connect_timeout_s=5.0)

    text = str(error)
    assert took < 5.0 + FAST_S
    assert "TLS handshake failed" in text and "KAFKA_SSL_CA_LOCATION" in text
    assert "certificate verify failed" in text
    assert not [s for s in _secrets(flow) if s in text or s in repr(error)]


class _Trespasser(FunctionRunner):
    """Writes 10 rows to its own topic, then (same transaction) to a topic it has no ACL for."""

    source_system = "TEST"

    def __init__(self, function: str, own: str, foreign: str, admin: dict[str, str]) -> None:
        super().__init__(function)
        self.own, self.foreign, self.admin = own, foreign, admin

    def _until_sent(self, rows: int, timeout_s: float = 15.0) -> None:
        """Wait until the rows are on the broker (uncommitted), so the abort must hide them."""
        deadline = time.monotonic() + timeout_s
        while len(read_all(self.admin, self.own, isolation="read_uncommitted")) < rows:
            assert time.monotonic() < deadline, f"{rows} rows never reached {self.own}"
            time.sleep(0.2)

    async def initial_load(self, producer: KafkaProducer, reader) -> None:
        schema = await reader.load(
            "T", "SELECT range::BIGINT AS ID, 'n' AS NAME FROM range(10)", "TEST", "TEST"
        )
        schema.set_primary_keys("ID")
        own = producer.add_target(self.own, "T", KeySchema(schema), schema)
        producer.produce_from_duckdb("T", own, 100, RowType.INSERT)
        self._until_sent(10)
        foreign = producer.add_target(self.foreign, "T", KeySchema(schema), schema)
        producer.produce_from_duckdb("T", foreign, 100, RowType.INSERT)
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader) -> None:
        raise NotImplementedError


@pytest.mark.parametrize(
    "may_describe",
    [False, True],
    ids=["no-acl", "describe-only"],
)
def test_a_flow_writing_a_topic_without_acl_fails_and_publishes_nothing(
    flow, admin_conf, monkeypatch, may_describe
):
    foreign = create_topic(admin_conf, f"someone_else.{uuid.uuid4().hex[:8]}")
    if may_describe:  # the topic is found, and the write itself is refused
        acls.create(
            admin_conf,
            [
                AclBinding(
                    ResourceType.TOPIC,
                    foreign,
                    ResourcePatternType.LITERAL,
                    f"User:{flow.grant.user}",
                    "*",
                    AclOperation.DESCRIBE,
                    AclPermissionType.ALLOW,
                )
            ],
        )
    own = flow.topic("mine")
    for name, value in flow.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLOW_ENVIRONMENT", flow.grant.environment)

    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        asyncio.run(_Trespasser(flow.grant.function, own, foreign, admin_conf).run("initial"))
    took = time.monotonic() - started

    text = str(failed.value)
    assert took < 10.0 + FAST_S
    assert failed.value.result.status == "FAILED"
    assert len(read_all(admin_conf, own, isolation="read_uncommitted")) == 10  # sent, and...
    assert read_all(admin_conf, own) == []  # ...aborted with the rest of the transaction
    assert read_all(admin_conf, foreign) == []
    assert not [s for s in _secrets(flow) if s in text]
    key = f"{flow.grant.function}|default|0".encode()
    records = [
        m.value().decode() for m in read_all(admin_conf, EXECUTION_LOG_TOPIC) if m.key() == key
    ]
    assert [json.loads(r)["status"] for r in records] == ["STARTED", "FAILED"]
    assert foreign in json.loads(records[-1])["error"]  # the run's record names the topic
    assert not [s for s in _secrets(flow) if any(s in r for r in records)]
    assert foreign in text and "authorization failed" in text.lower()


def test_the_writer_user_can_write_nothing(writer_conf, admin_conf):
    topic = create_topic(admin_conf, f"writer_target.{uuid.uuid4().hex[:8]}")
    errors: list[str] = []
    producer = Producer({**writer_conf, "log_level": 3})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err.name()))
    assert producer.flush(15) == 0
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"]
    assert read_all(admin_conf, topic) == []


def test_a_flow_cannot_use_another_flows_transactional_id(flow):
    other = KafkaProducer("T", "another_flow", "bronze", "dev", flow.settings())
    started = time.monotonic()
    with pytest.raises((ProduceError, KafkaException)) as refused:
        with other:
            pass
    assert time.monotonic() - started < FAST_S
    assert "Transactional Id authorization failed" in str(refused.value)


def test_another_flows_transactional_id_is_refused_with_a_produce_error(flow):
    other = KafkaProducer("T", "another_flow", "bronze", "dev", flow.settings())
    with pytest.raises(ProduceError, match="dev.bronze.another_flow.0"):
        with other:
            pass


def test_no_generated_password_in_the_broker_files(secured):
    passwords = {u: p for u, p in secure.credentials(secured).items()}
    texts = {path: path.read_text(errors="replace") for path in Path(secured.root).rglob("*.log")}
    assert texts  # the broker's own logs exist
    for path, text in texts.items():
        assert not [u for u, p in passwords.items() if p in text], path


@pytest.mark.parametrize(
    ("group", "allowed"),
    [("lakehouse-writer-lag", True), ("someone-elses-group", False)],
    ids=["own-group", "other-group"],
)
def test_the_writer_user_commits_offsets_of_its_own_groups_only(
    writer_conf, admin_conf, group, allowed
):
    topic = create_topic(admin_conf, f"monitored.{uuid.uuid4().hex[:8]}")
    writer = AdminClient({**writer_conf, "log_level": 0})
    if allowed:
        assert _commit_offset(writer, group, topic) is None
    else:
        with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
            _commit_offset(writer, group, topic)
    admin = AdminClient({**admin_conf, "log_level": 0})
    stored = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
    )[group].result(timeout=15)
    assert stored.topic_partitions[0].offset == (5 if allowed else OFFSET_INVALID)


_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}  # a new broker's first group


def _commit_offset(admin: AdminClient, group: str, topic: str) -> None:
    """Commit offset 5 of ``topic`` for ``group``, retrying while its coordinator loads."""
    deadline = time.monotonic() + 20
    while True:
        offsets = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 5)])]
        done = admin.alter_consumer_group_offsets(offsets, request_timeout=10)[group]
        error = done.result(timeout=15).topic_partitions[0].error
        if error is None:
            return None
        if error.code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
            raise KafkaException(error)
        time.sleep(0.5)
