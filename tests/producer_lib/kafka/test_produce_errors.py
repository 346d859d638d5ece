"""Errors that name what went wrong (issue 24, item 5): a row too large, a refused login."""

from __future__ import annotations

import logging

import duckdb
import pytest
from pydantic import SecretStr

from producer_lib.errors import KafkaUnavailable, ProduceError
from producer_lib.kafka.transactions import ConnectionRefused, classify_startup_errors
from producer_lib.schema import KeySchema, RowType
from producer_lib.settings import KafkaSettings
from tests.support.consume import consume_all
from tests.support.producers import notes_schema, shop_producer

log = logging.getLogger("test")
PASSWORD = "pw-Zq81-never-shown"


@pytest.mark.kafka
def test_a_row_over_message_max_bytes_is_named_with_its_size(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    con = duckdb.connect()
    con.sql(
        "create table NOTES as select range::bigint as ID, case when range = 5 "
        "then repeat('x', 30000) else 'short' end as TEXT from range(10)"
    )
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap, overrides={"message.max.bytes": 20_000}
    )
    with shop_producer(settings, con) as producer:
        target = producer.add_target(topic, "NOTES", KeySchema(notes_schema()), notes_schema())
        with pytest.raises(ProduceError, match="over message.max.bytes=20,000") as info:
            producer.produce_from_duckdb("NOTES", target, 100, RowType.REPLACE)
        producer.abort()
    error = info.value
    assert (error.topic, error.table, error.row, error.key) == (topic, "SHOP.NOTES", 6, {"ID": 5})
    assert error.size_bytes > 30_000 and error.limit_bytes == 20_000
    assert "KafkaException" not in str(error) and "30,0" in str(error)
    assert consume_all(kafka_bootstrap, topic) == []


@pytest.mark.kafka
def test_a_refused_login_says_authentication_failed_not_timeout(kafka_bootstrap):
    """The devstack listener is PLAINTEXT: a SASL client's handshake is refused there."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=SecretStr(PASSWORD),
        connect_timeout_s=3,
    )
    with pytest.raises(ConnectionRefused) as info:
        with shop_producer(settings, None):
            pass
    text = str(info.value)
    assert text.startswith("authentication failed")
    assert not isinstance(info.value, KafkaUnavailable) and "within" not in text
    for shown in (kafka_bootstrap, "sasl_mechanism='PLAIN'", "sasl_username='alice'"):
        assert shown in text
    assert PASSWORD not in text and PASSWORD not in repr(info.value)


@pytest.mark.parametrize(
    ("errors", "cause"),
    [
        pytest.param(
            [
                (
                    "_TRANSPORT",
                    "sasl_plaintext://127.0.0.1:19092/bootstrap: Connect to "
                    "ipv4#127.0.0.1:19092 failed: Connection refused (after 0ms in state CONNECT)",
                ),
                (
                    "_AUTHENTICATION",
                    "sasl_plaintext://127.0.0.1:19092/bootstrap: SASL PLAIN "
                    "mechanism handshake failed: Broker: Request not valid in current SASL state",
                ),
                ("_ALL_BROKERS_DOWN", "1/1 brokers are down"),
            ],
            "authentication",
            id="sasl-client-plaintext-listener",
        ),
        pytest.param(
            [
                (
                    "_AUTHENTICATION",
                    "sasl_ssl://b:9093/1: SASL authentication error: "
                    "Authentication failed during authentication due to invalid credentials with "
                    "SASL mechanism PLAIN",
                )
            ],
            "authentication",
            id="wrong-password",
        ),
        pytest.param(
            [
                (
                    "_TRANSPORT",
                    "sasl_plaintext://h:9092/bootstrap: Connect to ipv4#h:9092 "
                    "failed: Connection refused",
                )
            ],
            "unreachable",
            id="sasl-client-nothing-listening",
        ),
        pytest.param(
            [
                (
                    "_SSL",
                    "ssl://h:9093/bootstrap: SSL handshake failed: error:0A000086:SSL "
                    "routines::certificate verify failed",
                )
            ],
            "tls",
            id="untrusted-certificate",
        ),
        pytest.param(
            [
                (
                    "_TRANSPORT",
                    "h:9093/bootstrap: Disconnected while requesting ApiVersion: "
                    "might be caused by incorrect security.protocol configuration (connecting to a "
                    "SSL listener?)",
                )
            ],
            "security_protocol",
            id="plaintext-client-ssl-listener",
        ),
        pytest.param([("_ALL_BROKERS_DOWN", "1/1 brokers are down")], "unreachable", id="all-down"),
        pytest.param([("_MSG_TIMED_OUT", "whatever")], None, id="unrelated"),
        pytest.param([], None, id="nothing"),
    ],
)
def test_classify_startup_errors(errors, cause):
    assert classify_startup_errors(errors) == cause


@pytest.mark.kafka
def test_a_message_the_topic_refuses_names_topic_table_and_limit(kafka_bootstrap, new_topic):
    """The client's limit passes, the topic's smaller max.message.bytes refuses the batch."""
    topic = new_topic(config={"max.message.bytes": "2000"})
    con = duckdb.connect()
    con.sql(
        "create table NOTES as select range::bigint as ID, case when range = 1 "
        "then repeat('x', 5000) else 'short' end as TEXT from range(3)"
    )
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, overrides={"linger.ms": 0})
    with shop_producer(settings, con) as producer:
        target = producer.add_target(topic, "NOTES", KeySchema(notes_schema()), notes_schema())
        producer.produce_from_duckdb("NOTES", target, 10, RowType.REPLACE, partition=0)
        with pytest.raises(ProduceError, match="topic's max.message.bytes") as info:
            producer.commit()
        producer.abort()
    assert f"topic={topic} table=SHOP.NOTES" in str(info.value)
