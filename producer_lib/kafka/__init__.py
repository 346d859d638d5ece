"""Kafka side of producer_lib: the transactional producer, schema catalogs, topics.

Quickstart::

    from producer_lib.kafka import KafkaProducer
    from producer_lib.schema import KeySchema, RowType
    from producer_lib.settings import KafkaSettings

    with KafkaProducer("LABWARE", "labware_flow", "bronze", "dev", KafkaSettings(), log) as p:
        target = p.add_target("SAMPLE_PLAN", "SAMPLE_PLAN", KeySchema(schema), schema)
        rows = p.produce_from_duckdb("SAMPLE_PLAN", target, 40_000, RowType.REPLACE)
        p.commit()

Schemas go to the compacted ``_schemas`` topic (single-object framing) unless
``SCHEMA_REGISTRY_URL`` is set (Confluent framing); every transaction ends with a record on
``_commits`` (``docs/WIRE.md``).
"""

from producer_lib.kafka.catalog import (
    ConfluentSchemaRegistry,
    EmbeddedCatalog,
    SchemaCatalog,
    catalog_from_settings,
)
from producer_lib.kafka.producer import KafkaProducer, Target
from producer_lib.kafka.transactions import ConnectionRefused, TransactionFailed

__all__ = [
    "ConfluentSchemaRegistry",
    "ConnectionRefused",
    "EmbeddedCatalog",
    "KafkaProducer",
    "SchemaCatalog",
    "Target",
    "TransactionFailed",
    "catalog_from_settings",
]
