"""A data topic's retention and cleanup policy: set by ``add_target``, checked first."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from producer_lib.kafka import KafkaProducer
from producer_lib.kafka.topics import data_topic_config
from producer_lib.schema import AvroLong, KeySchema, ValueSchema
from producer_lib.settings import KafkaSettings
from tests.support.kafka import topic_name

WEEK_MS = 7 * 24 * 3600 * 1000


@pytest.mark.parametrize(
    ("retention", "policy", "expected"),
    [
        (None, "delete", {"retention.ms": str(WEEK_MS), "cleanup.policy": "delete"}),
        (timedelta(days=2), "delete", {"retention.ms": "172800000", "cleanup.policy": "delete"}),
        (-1, "compact,delete", {"retention.ms": "-1", "cleanup.policy": "compact,delete"}),
    ],
)
def test_data_topic_config(retention, policy, expected):
    assert data_topic_config(retention, policy, WEEK_MS) == expected


@pytest.mark.parametrize(
    ("retention", "policy", "match"),
    [
        (timedelta(seconds=5), "delete", "at least one minute"),
        (0, "delete", "at least one minute"),
        (True, "delete", "at least one minute"),
        (None, "forever", "cleanup_policy must be one of delete, compact,delete, compact"),
    ],
)
def test_bad_topic_config_is_refused(retention, policy, match):
    with pytest.raises(ValueError, match=match):
        data_topic_config(retention, policy, WEEK_MS)


def _schema() -> ValueSchema:
    schema = ValueSchema("T", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_primary_key("ID")
    return schema


def _topic_config(admin: AdminClient, topic: str) -> tuple[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=15)
    return config["retention.ms"].value, config["cleanup.policy"].value


@pytest.mark.kafka
def test_add_target_creates_change_topics_with_retention_and_changes_them_on_request(
    kafka_bootstrap, kafka_admin, request
):
    topic = topic_name(request.node.name, uuid.uuid4().hex[:6])
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    function = f"fn_{uuid.uuid4().hex[:8]}"
    log = logging.getLogger(__name__)
    schema = _schema()
    with KafkaProducer("SHOP", function, "bronze", "test", settings, log) as producer:
        producer.add_target(topic, "T", KeySchema(schema), schema)
        assert _topic_config(kafka_admin, topic) == (str(WEEK_MS), "delete")
        producer.add_target(topic, "T", KeySchema(schema), schema)  # nothing asked: unchanged
        assert _topic_config(kafka_admin, topic) == (str(WEEK_MS), "delete")
        producer.add_target(topic, "T", KeySchema(schema), schema, retention=timedelta(days=30))
        assert _topic_config(kafka_admin, topic) == (str(30 * 24 * 3600 * 1000), "delete")
        with pytest.raises(ValueError, match="cleanup_policy"):
            producer.add_target(topic, "T", KeySchema(schema), schema, cleanup_policy="keep")


@pytest.mark.kafka
def test_a_topic_made_by_another_client_a_moment_before_keeps_its_partition_count(
    kafka_bootstrap, kafka_admin, request
):
    """The broker's metadata may not show a topic created a moment before: its count is awaited.

    Falling back to the count asked (the settings' default, 1) sent every row of a 3-partition
    topic to partition 0 and refused an explicit partition 1 ("partition out of range").
    """
    from confluent_kafka.admin import NewTopic

    from producer_lib.kafka.topics import ensure_topic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # the producer's own client
    topics = [topic_name(request.node.name, f"{i}{uuid.uuid4().hex[:6]}") for i in range(16)]
    try:
        for topic in topics:
            kafka_admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(15)
            assert ensure_topic(admin, topic, 1, timeout_s=15) == 3, topic
    finally:
        kafka_admin.delete_topics(topics)
