"""Tables are keyed by schema name: add_target refuses a clashing second topic (issue 24, 9)."""

from __future__ import annotations

import logging
import uuid

import pytest

from producer_lib.errors import SchemaError
from producer_lib.kafka import KafkaProducer
from producer_lib.schema import AvroLong, AvroString, KeySchema, ValueSchema
from producer_lib.settings import KafkaSettings
from tests.support.kafka import topic_name

pytestmark = pytest.mark.kafka
log = logging.getLogger("test")


def _schema(name: str, id_type) -> ValueSchema:
    schema = ValueSchema(name, "BINDING")
    schema.add_field("ID", id_type, nullable=False)
    schema.add_primary_key("ID")
    return schema


def test_a_second_topic_with_a_clashing_type_for_the_same_table_is_refused(
    kafka_bootstrap, kafka_admin, new_topic, request
):
    name = f"T_{uuid.uuid4().hex[:8]}"
    first, second = new_topic(), topic_name(request.node.name, "_second")  # second: not made
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    with KafkaProducer("SRC", "binding_fn", "bronze", "test", settings, log) as producer:
        long_id = _schema(name, AvroLong())
        producer.add_target(first, name, KeySchema(long_id), long_id)
        text_id = _schema(name, AvroString())
        with pytest.raises(SchemaError) as error:
            producer.add_target(second, name, KeySchema(text_id), text_id)
    assert error.value.context["column"] == "ID"
    assert first in str(error.value) and second in str(error.value)
    assert second not in kafka_admin.list_topics(timeout=10).topics  # refused before creating
