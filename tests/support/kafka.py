"""Kafka fixtures: the session broker and a fresh topic per test.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set (any Kafka you point the tests at), else the
devstack broker: reused when it already runs, otherwise started for the session and stopped at
its end. There is no Docker engine on the machines this project targets, so no testcontainers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

TopicFactory = Callable[..., str]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real broker with transactions enabled."""
    from devstack import broker

    with broker.bootstrap_servers() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the session broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(request: pytest.FixtureRequest, kafka_admin: AdminClient) -> Iterator[TopicFactory]:
    """Create topics named after the test: ``new_topic(partitions=1, suffix="")`` -> name."""
    created: list[str] = []

    def make(partitions: int = 1, suffix: str = "", config: dict[str, str] | None = None) -> str:
        name = topic_name(request.node.name, suffix)
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        created.append(name)
        return name

    yield make
    if created:
        for future in kafka_admin.delete_topics(created).values():
            future.result(timeout=30)


def topic_name(test_name: str, suffix: str = "") -> str:
    """``t_<test name>_<8 hex>``, restricted to the characters Kafka allows in topic names."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{test_name}{suffix}")[:180]
    return f"t_{base}_{uuid.uuid4().hex[:8]}"
