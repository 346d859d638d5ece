"""Schema catalogs: the embedded `_flow_schemas` topic; the registry only when one is available.

`_schemas` is Confluent Schema Registry's own store: the embedded catalog still reads it (its
old name) and never writes to a topic holding registry records.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, NewTopic

from lakehouse_writer.read.catalog import SchemaCatalog
from producer_lib.errors import ConfigError, ProduceError, SchemaError
from producer_lib.kafka import KafkaProducer
from producer_lib.kafka.catalog import (
    ConfluentSchemaRegistry,
    EmbeddedCatalog,
    RegistryStoreError,
    catalog_from_settings,
)
from producer_lib.schema import (
    AvroInt,
    AvroLong,
    AvroString,
    KeySchema,
    ValueSchema,
    schema_fingerprint,
)
from producer_lib.schema.catalog_records import encode_record
from producer_lib.settings import KafkaSettings, SchemaRegistrySettings
from tests.support.consume import consume_all

COMPACTED = {"cleanup.policy": "compact"}
REGISTRY_KEY = b'{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}'
REGISTRY_VALUE = b'{"subject":"orders-value","version":1,"id":1,"schema":"\\"string\\""}'


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


@pytest.mark.slow  # starts the Apicurio registry (a JVM)
def test_registry_returns_confluent_header(schema_registry_url):
    catalog = ConfluentSchemaRegistry(SchemaRegistrySettings(url=schema_registry_url))
    topic = f"t_registry_{uuid.uuid4().hex[:8]}"
    header = catalog.register(topic, "value", _schema().to_avro_json())
    assert header[:1] == b"\x00" and len(header) == 5
    assert catalog.register(topic, "value", _schema().to_avro_json()) == header


def _produce(bootstrap: str, topic: str, *records: tuple[bytes, bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _catalog_records_of(bootstrap: str, catalog_topic: str, topic: str) -> list[dict]:
    values = [json.loads(m.value()) for m in consume_all(bootstrap, catalog_topic)]
    return [v for v in values if v.get("topic") == topic]


def _orders(id_type, name: str = "ORDERS") -> ValueSchema:
    schema = ValueSchema(name, f"T_{uuid.uuid4().hex[:8]}")  # a table name of this test only
    schema.add_field("ID", id_type, nullable=False)
    schema.add_primary_key("ID")
    return schema


def _renamed(schema: ValueSchema, id_type) -> ValueSchema:
    """A schema of the same table (namespace.name) whose ID has another type."""
    other = ValueSchema(schema.name, schema.namespace)
    other.add_field("ID", id_type, nullable=False)
    other.add_primary_key("ID")
    return other


@pytest.mark.kafka
def test_a_producer_writes_its_catalog_to_flow_schemas(kafka_bootstrap, new_topic, monkeypatch):
    monkeypatch.delenv("FLOW_SCHEMAS_TOPIC", raising=False)
    topic = new_topic()
    schema = _orders(AvroLong())
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    with KafkaProducer("SRC", "catalog_test", "bronze", "test", settings) as producer:
        producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
    records = _catalog_records_of(kafka_bootstrap, "_flow_schemas", topic)
    assert sorted(r["kind"] for r in records) == ["key", "value"]
    value = next(r for r in records if r["kind"] == "value")
    assert value["schema"] == schema.to_avro_json()
    assert value["fingerprint"] == schema_fingerprint(schema.to_avro_json()).hex()


@pytest.mark.kafka
def test_flow_schemas_topic_names_another_catalog(kafka_bootstrap, new_topic, monkeypatch):
    catalog_topic = new_topic(suffix="_catalog", config=COMPACTED)
    monkeypatch.setenv("FLOW_SCHEMAS_TOPIC", catalog_topic)
    catalog = EmbeddedCatalog(KafkaSettings(bootstrap_servers=kafka_bootstrap), legacy_topic=None)
    assert catalog.topic == catalog_topic
    catalog.register("orders", "value", _schema().to_avro_json())
    assert [
        r["subject"] for r in _catalog_records_of(kafka_bootstrap, catalog_topic, "orders")
    ] == ["orders-value"]


@pytest.mark.kafka
def test_writer_resolves_a_schema_found_only_under_the_old_name(kafka_bootstrap, new_topic):
    catalog_topic = new_topic(suffix="_catalog", config=COMPACTED)
    legacy_topic = new_topic(suffix="_legacy", config=COMPACTED)
    avro = _orders(AvroLong()).to_avro_json()
    fp = schema_fingerprint(avro).hex()
    # The old topic as a cluster with a registry has it: registry records beside ours.
    _produce(
        kafka_bootstrap,
        legacy_topic,
        (REGISTRY_KEY, REGISTRY_VALUE),
        encode_record(fp, "orders_old", "value", avro),
    )
    catalog = SchemaCatalog(
        {"bootstrap.servers": kafka_bootstrap}, catalog_topic, legacy_topic=legacy_topic
    )
    found = catalog.by_fingerprint({fp, "00000000000000ff"})
    assert list(found) == [fp]
    assert json.loads(found[fp].schema_json) == avro
    assert (found[fp].topic, found[fp].kind) == ("orders_old", "value")
    assert catalog.latest_value_schemas() == []  # tables are made ahead from the new topic only


@pytest.mark.kafka
def test_writer_reads_flow_schemas_then_schemas_by_default(kafka_bootstrap, kafka_admin):
    avro = _orders(AvroLong(), f"LEGACY_{uuid.uuid4().hex[:8]}").to_avro_json()  # unique
    fp = schema_fingerprint(avro).hex()
    future = kafka_admin.create_topics([NewTopic("_schemas", 1, 1, config=COMPACTED)])
    try:
        future["_schemas"].result(timeout=30)
    except Exception as exc:  # noqa: BLE001 - it exists: other tests or an old producer made it
        assert "already exists" in str(exc).lower() or "TOPIC_ALREADY_EXISTS" in str(exc)
    # Only a record of ours goes to the real `_schemas`: other tests read it as ours.
    _produce(kafka_bootstrap, "_schemas", encode_record(fp, f"t_legacy_{fp}", "value", avro))
    found = SchemaCatalog({"bootstrap.servers": kafka_bootstrap}).by_fingerprint({fp})
    assert json.loads(found[fp].schema_json) == avro


@pytest.mark.kafka
def test_a_catalog_topic_holding_registry_records_is_refused(kafka_bootstrap, new_topic):
    registry_store = new_topic(suffix="_store", config=COMPACTED)
    _produce(
        kafka_bootstrap,
        registry_store,
        (b'{"keytype":"NOOP","magic":0}', b""),
        (REGISTRY_KEY, REGISTRY_VALUE),
    )
    catalog = EmbeddedCatalog(
        KafkaSettings(bootstrap_servers=kafka_bootstrap), registry_store, legacy_topic=None
    )
    with pytest.raises(RegistryStoreError) as caught:
        catalog.register("orders", "value", _schema().to_avro_json())
    message = str(caught.value)
    assert isinstance(caught.value, ProduceError)
    assert f"topic {registry_store} holds Schema Registry records" in message
    assert "kafkastore.topic" in message and "FLOW_SCHEMAS_TOPIC" in message
    assert caught.value.topic == registry_store and caught.value.offset == 0
    assert len(consume_all(kafka_bootstrap, registry_store, "read_uncommitted")) == 2  # unwritten


@pytest.mark.kafka
def test_a_producer_pointed_at_a_registry_store_adds_no_target(
    kafka_bootstrap, new_topic, monkeypatch
):
    registry_store = new_topic(suffix="_store", config=COMPACTED)
    _produce(kafka_bootstrap, registry_store, (REGISTRY_KEY, REGISTRY_VALUE))
    monkeypatch.setenv("FLOW_SCHEMAS_TOPIC", registry_store)
    schema = _orders(AvroLong())
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    with KafkaProducer("SRC", "catalog_test", "bronze", "test", settings) as producer:
        with pytest.raises(ProduceError, match="holds Schema Registry records"):
            producer.add_target(new_topic(), "ORDERS", KeySchema(schema), schema)
    assert len(consume_all(kafka_bootstrap, registry_store, "read_uncommitted")) == 1


@pytest.mark.kafka
def test_check_binding_refuses_a_clashing_schema_name_on_another_topic(
    kafka_bootstrap, new_topic, caplog
):
    catalog_topic = new_topic(suffix="_catalog", config=COMPACTED)
    eu, us, apac = new_topic(suffix="_eu"), new_topic(suffix="_us"), new_topic(suffix="_apac")
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    first = EmbeddedCatalog(settings, catalog_topic, legacy_topic=None)
    schema = _orders(AvroLong())
    first.check_binding(eu, schema)
    first.register(eu, "value", schema.to_avro_json())

    later = EmbeddedCatalog(settings, catalog_topic, legacy_topic=None)  # another flow's run
    with pytest.raises(SchemaError) as caught:
        later.check_binding(us, _renamed(schema, AvroString()))
    error = caught.value
    assert (error.topic, error.other_topic, error.column) == (us, eu, "ID")
    assert (error.type, error.other_type) == ("STRING", "BIGINT")
    assert error.table == f"{schema.namespace}.ORDERS"
    with caplog.at_level(logging.WARNING):
        later.check_binding(apac, _renamed(schema, AvroInt()))  # INT widens to BIGINT
    assert f"topic={apac} other_topics={eu}" in caplog.text


@pytest.mark.kafka
def test_check_binding_reads_bindings_from_the_old_catalog_topic(kafka_bootstrap, new_topic):
    catalog_topic = new_topic(suffix="_catalog", config=COMPACTED)
    legacy_topic = new_topic(suffix="_legacy", config=COMPACTED)
    eu, us = new_topic(suffix="_eu"), new_topic(suffix="_us")
    schema = _orders(AvroLong())
    avro = schema.to_avro_json()
    _produce(
        kafka_bootstrap,
        legacy_topic,
        (REGISTRY_KEY, REGISTRY_VALUE),
        encode_record(schema_fingerprint(avro).hex(), eu, "value", avro),
    )
    catalog = EmbeddedCatalog(
        KafkaSettings(bootstrap_servers=kafka_bootstrap), catalog_topic, legacy_topic=legacy_topic
    )
    with pytest.raises(SchemaError, match=f"topic '{eu}' already feeds it"):
        catalog.check_binding(us, _renamed(schema, AvroString()))
    assert consume_all(kafka_bootstrap, catalog_topic, "read_uncommitted") == []
