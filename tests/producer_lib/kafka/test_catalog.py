"""Schema catalogs: the embedded `_schemas` topic; the registry only when one is available."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import ConfigResource

from producer_lib.errors import ConfigError, SchemaError
from producer_lib.kafka.catalog import (
    ConfluentSchemaRegistry,
    EmbeddedCatalog,
    catalog_from_settings,
)
from producer_lib.schema import AvroLong, KeySchema, ValueSchema, schema_fingerprint
from producer_lib.settings import KafkaSettings, SchemaRegistrySettings
from tests.support.consume import consume_all


def _schema() -> ValueSchema:
    schema = ValueSchema("T", "NS")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_primary_key("ID")
    return schema


@pytest.mark.kafka
def test_embedded_catalog_creates_compacted_topic_and_writes_once(kafka_bootstrap, kafka_admin):
    catalog_topic = f"t_schemas_{uuid.uuid4().hex[:8]}"
    catalog = EmbeddedCatalog(KafkaSettings(bootstrap_servers=kafka_bootstrap), catalog_topic)
    try:
        value = _schema().to_avro_json()
        header = catalog.register("orders", "value", value)
        assert catalog.register("orders", "value", json.dumps(value)) == header
        catalog.register("orders", "key", KeySchema(_schema()).to_avro_json())
        assert header == b"\xc3\x01" + schema_fingerprint(value)
        messages = consume_all(kafka_bootstrap, catalog_topic, "read_uncommitted")
        assert len(messages) == 2
        assert messages[0].key() == schema_fingerprint(value).hex().encode()
        assert json.loads(messages[0].value())["schema"] == value
        resource = ConfigResource("topic", catalog_topic)
        config = kafka_admin.describe_configs([resource])[resource].result(timeout=30)
        assert config["cleanup.policy"].value == "compact"
        metadata = kafka_admin.list_topics(catalog_topic, timeout=10)
        assert len(metadata.topics[catalog_topic].partitions) == 1
    finally:
        kafka_admin.delete_topics([catalog_topic])[catalog_topic].result(timeout=30)


@pytest.mark.parametrize(
    ("kind", "schema", "match"),
    [
        pytest.param("both", {"type": "record", "name": "x", "fields": []}, "kind", id="kind"),
        pytest.param("value", {"type": "nope"}, "fingerprint", id="invalid-avro"),
        pytest.param("value", "[1, 2]", "record", id="not-an-object"),
    ],
)
def test_embedded_catalog_rejects_bad_input(kind, schema, match):
    catalog = EmbeddedCatalog(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    with pytest.raises(SchemaError, match=match):
        catalog.register("orders", kind, schema)


def test_catalog_from_settings_picks_embedded_without_url(monkeypatch):
    monkeypatch.delenv("SCHEMA_REGISTRY_URL", raising=False)
    settings = KafkaSettings(bootstrap_servers="b:9092")
    assert isinstance(catalog_from_settings(settings, SchemaRegistrySettings()), EmbeddedCatalog)
    registry = SchemaRegistrySettings(url="http://registry:8080")
    try:
        import confluent_kafka.schema_registry  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"confluent-kafka\[schemaregistry\]"):
            catalog_from_settings(settings, registry)
    else:
        assert isinstance(catalog_from_settings(settings, registry), ConfluentSchemaRegistry)


def test_registry_returns_confluent_header(schema_registry_url):
    catalog = ConfluentSchemaRegistry(SchemaRegistrySettings(url=schema_registry_url))
    topic = f"t_registry_{uuid.uuid4().hex[:8]}"
    header = catalog.register(topic, "value", _schema().to_avro_json())
    assert header[:1] == b"\x00" and len(header) == 5
    assert catalog.register(topic, "value", _schema().to_avro_json()) == header
