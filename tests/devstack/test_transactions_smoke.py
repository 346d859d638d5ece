"""The devstack broker is a real Kafka with working transactions."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from tests.support.consume import consume_all

pytestmark = pytest.mark.kafka


def _transactional_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"smoke-{uuid.uuid4().hex}",
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(30)
    return producer


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_committed_transaction_is_visible_and_aborted_one_is_not(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    producer = _transactional_producer(kafka_bootstrap)

    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"k{i}", value=f"committed-{i}", partition=i % 2)
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=f"a{i}", value=f"aborted-{i}", partition=i % 2)
    producer.flush(30)  # the aborted rows really reach the log before the abort marker
    producer.abort_transaction(30)

    committed = consume_all(kafka_bootstrap, topic, "read_committed")
    uncommitted = consume_all(kafka_bootstrap, topic, "read_uncommitted")

    assert sorted(m.value().decode() for m in committed) == sorted(
        f"committed-{i}" for i in range(10)
    )
    assert sum(m.value().startswith(b"aborted-") for m in uncommitted) == 5
